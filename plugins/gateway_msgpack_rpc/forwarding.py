"""Commands for equipment connected to another gateway instance.

Equipment that connects to the RPC server talks to one instance, but the recipe engine sends a
command from whichever instance took the work. So each instance records in the store which
equipment is connected to it (hash ``rpc:owners``: equipment -> instance id, written with every
sign of life), and an instance that must command equipment connected elsewhere appends the
command to the owner's stream (``rpc:forward:<instance>``); the owner delivers it over its
connection. The owner reads its stream from the start and deletes what it handled, so a command
forwarded while it restarts is delivered when it is back; one that cannot be delivered is
answered with an error, so the engine's retry policy decides.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import TaskStatus

from gateway.equipment import EquipmentCommand, EquipmentReply
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.phases import DriverPhase
    from gateway.store import Store

log = logging.getLogger(__name__)

READ_BLOCK_MS = 500
OWNERS_REFRESH_SECONDS = 1.0


class Forwarding:
    """The store side of forwarding (owners, streams) and the service that delivers."""

    name = "msgpack-rpc-forwarding"
    roles = frozenset({"*"})  # wherever the binding runs, its equipment can be commanded

    def __init__(self, gateway: DriverPhase, deliver: Any) -> None:
        self.gateway = gateway
        self.deliver = deliver  # async (command) -> None, over this instance's connection
        self.owners: dict[str, str] = {}  # equipment -> instance, refreshed from the store
        self.forwarded = 0
        self.delivered = 0

    @property
    def instance(self) -> str:
        return self.gateway.instance_id

    def _store(self) -> Store | None:
        return self.gateway.store

    def _key(self, *parts: str) -> str:
        store = self._store()
        assert store is not None
        return store.keys.global_key("rpc", *parts)

    # -- owners -----------------------------------------------------------------------------

    async def claim(self, equipment_id: str) -> None:
        """``equipment_id`` is connected to this instance (called with every sign of life)."""
        store = self._store()
        if store is not None:
            await store.client.hset(self._key("owners"), equipment_id, self.instance)
            self.owners[equipment_id] = self.instance

    async def release(self, equipment_id: str) -> None:
        """Its connection to this instance ended; another instance may have taken it over."""
        store = self._store()
        if store is not None and await store.client.hget(self._key("owners"), equipment_id) == (
            self.instance
        ):
            await store.client.hdel(self._key("owners"), equipment_id)
        if self.owners.get(equipment_id) == self.instance:
            del self.owners[equipment_id]

    def owner_of(self, equipment_id: str) -> str | None:
        """Another instance the equipment is connected to, as last read (``None``: none)."""
        owner = self.owners.get(equipment_id)
        return owner if owner != self.instance else None

    async def _refresh_owners(self) -> None:
        store = self._store()
        if store is not None:
            owners = await store.client.hgetall(self._key("owners"))
            self.owners = {str(k): str(v) for k, v in owners.items()}

    # -- forwarding -------------------------------------------------------------------------

    async def forward(self, owner: str, command: EquipmentCommand) -> None:
        """Hand ``command`` to ``owner`` if it is alive; ``GatewayError`` otherwise."""
        instances = self.gateway.instances
        if instances is None or owner not in await instances.alive():
            raise GatewayError(f"equipment {command.equipment} was connected to {owner}, now gone")
        payload = json.dumps(dataclasses.asdict(command), default=str)
        store = self._store()
        assert store is not None
        await store.client.xadd(self._key("forward", owner), {"command": payload})
        self.forwarded += 1
        log.info("command %s forwarded to %s", command.correlation_id, owner)

    # -- the service ------------------------------------------------------------------------

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        if gateway.store is None:
            task_status.started()
            await gateway.stopping.wait()
            return
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._keep_owners)
            tasks.start_soon(self._deliver_forwarded)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()

    async def _keep_owners(self) -> None:
        while True:
            try:
                await self._refresh_owners()
            except Exception as error:  # the store may be away for a moment
                log.warning("equipment owners not read: %s", error)
            await anyio.sleep(OWNERS_REFRESH_SECONDS)

    async def _deliver_forwarded(self) -> None:
        store = self._store()
        assert store is not None
        stream, after = self._key("forward", self.instance), "0"
        while True:
            reply = await store.client.xread({stream: after}, count=100, block=READ_BLOCK_MS)
            for _, entries in cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], reply or []):
                for entry_id, fields in entries:
                    after = entry_id
                    await self._deliver(fields)
                    await store.client.xdel(stream, entry_id)

    async def _deliver(self, fields: dict[str, str]) -> None:
        try:
            command = EquipmentCommand(**json.loads(fields["command"]))
        except (KeyError, TypeError, ValueError) as error:
            log.error("forwarded command dropped: %s", error)
            return
        try:
            await self.deliver(command)
            self.delivered += 1
        except GatewayError as error:
            # Answer it, so the engine's retry policy decides (rather than its timeout).
            reply = EquipmentReply(command.correlation_id, error=str(error), scope=command.scope)
            await self.gateway.equipment.reply(reply)
