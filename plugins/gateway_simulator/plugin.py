"""Hook implementations of the simulator plugin (registered as ``simulator``).

Off unless ``simulator.enabled``. Then every instance registers an MQTT equipment driver for
the simulated equipment (so any instance can drive it), and instances of role ``simulator`` or
``all`` run the devices themselves (run them on one instance only: two simulators would both
answer every command).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.core import CoreSettings
from gateway.equipment import EquipmentDriver
from gateway.errors import SettingsError
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.transport import Service
from gateway_mqtt_equipment.driver import MqttEquipmentDriver
from gateway_simulator.service import SimulatorService
from gateway_simulator.settings import SimulatorSettings

if TYPE_CHECKING:
    from gateway.app import Gateway

DRIVER_NAME = "simulator"


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("simulator", SimulatorSettings)


@hookimpl
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: Gateway
) -> None:
    config = settings.get(SimulatorSettings)
    if config.enabled and config.equipment:
        register(
            MqttEquipmentDriver(
                gateway,
                name=DRIVER_NAME,
                topic_prefix=config.topic_prefix,
                equipment=config.equipment,
                heartbeat_timeout_seconds=config.heartbeat_timeout_seconds,
            )
        )


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: Gateway
) -> None:
    config = settings.get(SimulatorSettings)
    if config.enabled and config.equipment:
        register(
            SimulatorService(
                config,
                mqtt_url=_broker_url(settings, config),
                instance_id=settings.get(CoreSettings).effective_instance_id,
            )
        )


def _broker_url(settings: Settings, config: SimulatorSettings) -> str:
    if config.mqtt_url:
        return config.mqtt_url
    try:
        url = settings.section("mqtt").url
    except (KeyError, AttributeError):
        raise SettingsError(
            "simulator.mqtt_url", "no [mqtt] section to take the broker from: set the URL"
        ) from None
    return str(url)
