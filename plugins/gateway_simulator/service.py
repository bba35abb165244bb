"""The simulator service: the simulated station's devices, each on its own link."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from gateway.errors import SettingsError
from gateway.topics import EquipmentTopics
from gateway_simulator.devices import Device, SimulatedStation
from gateway_simulator.links import DeviceLink, MqttDeviceLink, RpcDeviceLink
from gateway_simulator.settings import SimulatorSettings

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)


class SimulatorService:
    """Runs the simulated station until the gateway stops (roles ``simulator`` and ``all``).

    Each device gets the link of its transport: MessagePack-RPC for the names in
    ``simulator.rpc_devices`` (connecting to ``rpc_address``), MQTT for the others (connecting
    to ``mqtt_url``).
    """

    name = "simulator"
    roles = frozenset({"simulator"})

    def __init__(
        self,
        settings: SimulatorSettings,
        *,
        mqtt_url: str,
        instance_id: str,
        rpc_address: tuple[str, int] | None = None,
    ) -> None:
        self.settings = settings
        self.station = SimulatedStation(settings)
        self.topics = EquipmentTopics(settings.topic_prefix)
        self.links: list[DeviceLink] = [
            self._link(device, mqtt_url, instance_id, rpc_address)
            for device in self.station.devices.values()
        ]

    def _link(
        self,
        device: Device,
        mqtt_url: str,
        instance_id: str,
        rpc_address: tuple[str, int] | None,
    ) -> DeviceLink:
        if device.name in self.settings.rpc_devices:
            if rpc_address is None:
                raise SettingsError(
                    "simulator.rpc_port", f"{device.name} speaks RPC, but to no RPC server"
                )
            host, port = rpc_address
            token = self.settings.tokens.get(device.name)
            return RpcDeviceLink(device, host=host, port=port, token=token)
        password = self.settings.passwords.get(device.name)
        return MqttDeviceLink(
            device,
            url=mqtt_url,
            topics=self.topics,
            heartbeat_seconds=self.settings.heartbeat_seconds,
            client_id=f"sim-{instance_id}-{device.name}",
            credentials=(device.name, password) if password is not None else None,
        )

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        async with self.station.running(), anyio.create_task_group() as links:
            for link in self.links:
                await links.start(link.run, gateway.stopping)
            log.info(
                "simulated station up: %s",
                ", ".join(f"{d.kind} {d.name}" for d in self.station.devices.values()),
            )
            task_status.started()
            await gateway.stopping.wait()
