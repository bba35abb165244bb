"""MQTT equipment driver: commands to equipment over MQTT, replies/events/heartbeats back.

An integrator's driver plugin subclasses ``MqttEquipmentDriver`` and only shapes payloads; see
``docs/drivers.md``.
"""

from gateway_mqtt_equipment.conventions import (
    ACTION,
    EQUIPMENT,
    HEARTBEAT_TYPE,
    JOB_ORDER,
    OFFLINE_TYPE,
    WILDCARD,
    EquipmentTopics,
    check_topic_level,
    check_topic_prefix,
)
from gateway_mqtt_equipment.driver import MqttEquipmentDriver
from gateway_mqtt_equipment.settings import MqttEquipmentSettings

__all__ = [
    "ACTION",
    "EQUIPMENT",
    "HEARTBEAT_TYPE",
    "JOB_ORDER",
    "OFFLINE_TYPE",
    "WILDCARD",
    "EquipmentTopics",
    "MqttEquipmentDriver",
    "MqttEquipmentSettings",
    "check_topic_level",
    "check_topic_prefix",
]
