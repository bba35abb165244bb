"""Hook implementations of the simulator plugin (registered as ``simulator``).

Off unless ``simulator.enabled``. Then every instance registers an MQTT equipment driver for
the simulated equipment that speaks MQTT (so any instance can drive it; the devices in
``simulator.rpc_devices`` are served by the MessagePack-RPC driver of the instance they connect
to), and instances of role ``simulator`` or ``all`` run the devices themselves (run them on one
instance only: two simulators would both answer every command).
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
from gateway_mqtt import MqttSettings
from gateway_mqtt_equipment import MqttEquipmentDriver
from gateway_msgpack_rpc import MsgpackRpcSettings
from gateway_simulator.service import SimulatorService
from gateway_simulator.settings import SimulatorSettings

if TYPE_CHECKING:
    from gateway.phases import DriverPhase, ServicePhase

DRIVER_NAME = "simulator"
_EVERY_ADDRESS = ("0.0.0.0", "::", "")


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("simulator", SimulatorSettings)


@hookimpl
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
) -> None:
    config = settings.get(SimulatorSettings)
    if config.enabled and config.mqtt_devices:
        register(
            MqttEquipmentDriver(
                gateway,
                name=DRIVER_NAME,
                topic_prefix=config.topic_prefix,
                equipment=config.mqtt_devices,
                heartbeat_timeout_seconds=config.heartbeat_timeout_seconds,
            )
        )


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    config = settings.get(SimulatorSettings)
    if config.enabled and config.equipment:
        register(
            SimulatorService(
                config,
                mqtt_url=_broker_url(settings, config) if config.mqtt_devices else "",
                instance_id=settings.get(CoreSettings).effective_instance_id,
                rpc_address=_rpc_address(settings, config) if config.rpc_devices else None,
            )
        )


def _broker_url(settings: Settings, config: SimulatorSettings) -> str:
    if config.mqtt_url:
        return config.mqtt_url
    mqtt = settings.find(MqttSettings)
    if mqtt is None:
        raise SettingsError(
            "simulator.mqtt_url", "no [mqtt] section to take the broker from: set the URL"
        )
    return mqtt.url


def _rpc_address(settings: Settings, config: SimulatorSettings) -> tuple[str, int]:
    """Where the RPC devices connect: ``rpc_host``/``rpc_port``, else the gateway's own RPC
    server (``[msgpack_rpc] host``/``port``)."""
    server = settings.find(MsgpackRpcSettings)
    host = config.rpc_host or (server.host if server is not None else "") or "127.0.0.1"
    if host in _EVERY_ADDRESS:
        host = "127.0.0.1" if ":" not in host else "::1"
    port = config.rpc_port or (server.port if server is not None else 0)
    if not port:
        raise SettingsError(
            "simulator.rpc_port",
            f"rpc_devices {', '.join(config.rpc_devices)} need an RPC server: set "
            "msgpack_rpc.port (the gateway's own) or simulator.rpc_port",
        )
    return host, port
