"""The ``[mqtt_equipment]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import setting
from gateway.topics import EQUIPMENT_PREFIX
from gateway_mqtt_equipment.conventions import WILDCARD, check_topic_level, check_topic_prefix


@dataclass(frozen=True)
class MqttEquipmentSettings:
    """Settings of one MQTT equipment driver (plugins subclass it for sections of their own)."""

    topic_prefix: str = setting(
        EQUIPMENT_PREFIX,
        "Equipment topics: <prefix>/<equipment>/commands|replies|events|heartbeat (replies, "
        "events and heartbeats shared by every instance)",
    )
    equipment: list[str] = setting(
        [],
        "Equipment names this driver serves, or '*' for any equipment no other driver serves; "
        "empty: the driver is off",
    )
    heartbeat_timeout_seconds: float = setting(
        10.0,
        "Equipment is offline when its last heartbeat is older than this; "
        "0: the equipment sends no heartbeats",
        minimum=0,
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        check_topic_prefix("topic_prefix", self.topic_prefix)
        for name in self.equipment:
            if name != WILDCARD:
                check_topic_level("equipment", name)
