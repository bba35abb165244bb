"""The ACME nutrunner driver plugin, written against the gateway's public API only.

ACME controllers speak the gateway's MQTT equipment conventions (topics, CloudEvents, Response
Topic, Correlation Data) with payloads of their own, so this driver only shapes payloads:

- command data ``{"Program": <int>, "TargetTorqueNm": <float>}`` from the action's parameters
  ``program`` and ``torque_spec`` (``"85Nm"``);
- reply data ``{"Status": "OK", "TorqueNm": 85.2}`` becomes ``{"torque": 85.2, "unit": "Nm"}``;
  ``{"Status": "NOK", "Code": "E042"}`` becomes the action's error ``"NOK E042"``.

Settings section ``[acme]``: ``topic_prefix`` (default ``acme``), ``equipment`` (the nutrunners'
names), ``heartbeat_timeout_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand, EquipmentDriver
from gateway.hookspecs import hookimpl
from gateway.settings import Settings, setting
from gateway_mqtt_equipment import MqttEquipmentDriver, MqttEquipmentSettings

if TYPE_CHECKING:
    from gateway.phases import DriverPhase


@dataclass(frozen=True)
class AcmeSettings(MqttEquipmentSettings):
    topic_prefix: str = setting("acme", "ACME nutrunner topics: <prefix>/<nutrunner>/...")


class AcmeDriver(MqttEquipmentDriver):
    """ACME nutrunners: the MQTT equipment driver with ACME's payloads."""

    def payload_for(self, command: EquipmentCommand) -> Any:
        spec = str(command.parameters.get("torque_spec", "0"))
        return {
            "Program": int(command.parameters.get("program", 1)),
            "TargetTorqueNm": float(spec.lower().removesuffix("nm").strip()),
        }

    def read_reply(self, event: CloudEvent) -> tuple[Any, str | None]:
        data = event.data if isinstance(event.data, dict) else {}
        if data.get("Status") != "OK":
            return data, f"{data.get('Status', 'no status')} {data.get('Code', '')}".strip()
        return {"torque": data.get("TorqueNm"), "unit": "Nm"}, None


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("acme", AcmeSettings)


@hookimpl
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
) -> None:
    config = settings.get(AcmeSettings)
    if config.equipment:
        register(AcmeDriver.from_settings(gateway, config, name="acme"))
