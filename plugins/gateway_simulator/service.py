"""The simulator service: the simulated station's devices, each on its own link."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from gateway_mqtt_equipment.conventions import EquipmentTopics
from gateway_simulator.devices import SimulatedStation
from gateway_simulator.links import DeviceLink, MqttDeviceLink
from gateway_simulator.settings import SimulatorSettings

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)


class SimulatorService:
    """Runs the simulated station until the gateway stops (roles ``simulator`` and ``all``)."""

    name = "simulator"
    roles = frozenset({"simulator"})

    def __init__(self, settings: SimulatorSettings, *, mqtt_url: str, instance_id: str) -> None:
        self.settings = settings
        self.station = SimulatedStation(settings)
        topics = EquipmentTopics(settings.topic_prefix)
        self.links: list[DeviceLink] = [
            MqttDeviceLink(
                device,
                url=mqtt_url,
                topics=topics,
                heartbeat_seconds=settings.heartbeat_seconds,
                client_id=f"sim-{instance_id}-{device.name}",
            )
            for device in self.station.devices.values()
        ]

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
