"""One gateway process of the chaos test (not a test module: ``test_chaos.py`` starts it).

A full gateway (MQTT binding, Redis store, job management, SFC engine) from the ``GATEWAY_...``
environment, plus equipment that answers every command at once and appends its correlation id to
the Redis list ``CHAOS_RECORD_KEY`` first, so the test can count dispatches across processes,
including the ones that were killed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import anyio

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentDriver, EquipmentReply
from gateway.hookspecs import hookimpl
from gateway.logs import configure_logging
from gateway.settings import Settings


class RecordingEquipment:
    name = "recording-equipment"

    def __init__(self, redis_url: str, record_key: str) -> None:
        self.redis_url = redis_url
        self.record_key = record_key
        self.gateway: Gateway | None = None

    def serves(self, command: EquipmentCommand) -> bool:
        return True

    async def send(self, command: EquipmentCommand) -> None:
        assert self.gateway is not None
        assert self.gateway.store is not None
        # The gateway's own store client: it reaches whatever deployment the URL names.
        await self.gateway.store.client.rpush(self.record_key, command.correlation_id)
        reply = EquipmentReply(
            command.correlation_id, data={"ok": True, "action": command.action}, scope=command.scope
        )
        await self.gateway.equipment.reply(reply)

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Callable[[EquipmentDriver], None], settings: Settings, gateway: Gateway
    ) -> None:
        self.gateway = gateway
        register(self)


def main() -> None:
    equipment = RecordingEquipment(os.environ["GATEWAY_REDIS_URL"], os.environ["CHAOS_RECORD_KEY"])
    gateway = Gateway.from_environment(None, extra_plugins={"equipment": equipment})
    configure_logging(gateway.settings)

    async def run() -> Any:
        await gateway.run(handle_signals=True)

    anyio.run(run)


if __name__ == "__main__":
    main()
