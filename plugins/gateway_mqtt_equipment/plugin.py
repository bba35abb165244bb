"""Hook implementations of the MQTT equipment driver plugin (registered as ``mqtt-equipment``).

- settings section ``[mqtt_equipment]``;
- the configured driver (off until ``mqtt_equipment.equipment`` names equipment or ``*``);
- the processors of *every* ``MqttEquipmentDriver`` registered, including those of other
  plugins (an integrator's driver plugin only registers its driver).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.equipment import EquipmentDriver
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.transport import MQTT_BINDING, Processor
from gateway_mqtt_equipment.driver import MqttEquipmentDriver
from gateway_mqtt_equipment.settings import MqttEquipmentSettings

if TYPE_CHECKING:
    from gateway.phases import DriverPhase, ProcessorPhase

log = logging.getLogger(__name__)

BINDING = MQTT_BINDING


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("mqtt_equipment", MqttEquipmentSettings)


@hookimpl
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
) -> None:
    config = settings.get(MqttEquipmentSettings)
    if not config.equipment:
        log.debug("MQTT equipment driver off: mqtt_equipment.equipment is empty")
        return
    if BINDING not in gateway.bindings:
        log.warning("MQTT equipment driver off: no %s binding is loaded", BINDING)
        return
    register(MqttEquipmentDriver.from_settings(gateway, config))


@hookimpl
def gateway_register_processors(
    register: Callable[[Processor], None], settings: Settings, gateway: ProcessorPhase
) -> None:
    for driver in gateway.equipment.drivers:
        if isinstance(driver, MqttEquipmentDriver):
            for processor in driver.processors():
                register(processor)
