"""Commands for equipment connected to another gateway instance.

Equipment that connects to the RPC server talks to one instance, but the recipe engine sends a
command from whichever instance took the work. So each instance records in the store which
equipment is connected to it (hash ``rpc:owners``: equipment -> instance id, written with every
sign of life), and an instance that must command equipment connected elsewhere appends the
command to the owner's stream (``rpc:forward:<instance>``); the owner delivers it over its
connection. The owner reads its stream from the start and deletes what it handled, so a command
forwarded while it restarts is delivered when it is back; one that cannot be delivered is
answered with an error, so the engine's retry policy decides.

Both loops (owners, delivery) survive store outages through ``gateway.resilience``: the
readiness checks ``msgpack-rpc.owners`` and ``msgpack-rpc.forwarding`` fail meanwhile, and a
forwarded command is deleted from the stream only once it was delivered (or answered).
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
        self._after = "0"

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
        await self.gateway.resilience.forever(
            "msgpack-rpc.owners", self._refresh_owners, interval=OWNERS_REFRESH_SECONDS, logger=log
        )

    async def _deliver_forwarded(self) -> None:
        self._after = "0"  # entries up to here are delivered (and deleted)
        await self.gateway.resilience.forever(
            "msgpack-rpc.forwarding", self._deliver_batch, logger=log
        )

    async def _deliver_batch(self) -> None:
        """Read what was forwarded to this instance; deliver and delete each entry in turn.

        A store failure on the way leaves the entry in the stream: the next batch (after the
        backoff) starts from it again, and the equipment gets it once more with the same
        correlation id (equipment treats a repetition idempotently).
        """
        store = self._store()
        assert store is not None
        stream = self._key("forward", self.instance)
        reply = await store.client.xread({stream: self._after}, count=100, block=READ_BLOCK_MS)
        for _, entries in cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], reply or []):
            for entry_id, fields in entries:
                await self._deliver(fields)
                await store.client.xdel(stream, entry_id)
                self._after = entry_id

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
