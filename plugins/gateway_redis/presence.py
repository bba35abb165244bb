"""Redis side of the host's presence records: gateway instances and equipment liveness.

``gateway.store.InstanceTable`` (``store.instances``): one hash ``instances`` (instance id ->
time of its last refresh), and ``store-id``, the store's identity (random, set once).
``gateway.store.LivenessRecords`` (``store.liveness``):
``equipment:online:<id>`` exists while the equipment is online (TTL = its heartbeat timeout, so
Redis's clock decides, the same for every instance), the ``equipment:last-seen`` hash keeps the
time of the last heartbeat, ``equipment:gone`` the time and reason of a departure since (JSON),
for the explanation after the online key is gone. ``gateway.store.CommandLedger``
(``store.commands``): ``equipment:sent:<correlation id>`` names the equipment a command went to,
with a TTL, deleted once answered. Every key is in the ``_global`` slot.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.equipment import Liveness
from gateway.store import KeySchema

if TYPE_CHECKING:
    from redis.asyncio import Redis

Client = Callable[[], "Redis"]


class RedisInstanceTable:
    """``gateway.store.InstanceTable`` on a Redis hash."""

    def __init__(self, keys: KeySchema, client: Client) -> None:
        self._key = keys.global_key("instances")
        self._id_key = keys.global_key("store-id")
        self._client = client

    async def beat(self, instance_id: str, at: float) -> None:
        await self._client().hset(self._key, instance_id, repr(at))

    async def leave(self, instance_id: str) -> bool:
        return bool(await self._client().hdel(self._key, instance_id))

    async def seen(self) -> dict[str, float]:
        entries = await self._client().hgetall(self._key)
        return {str(name): float(at) for name, at in entries.items()}

    async def store_id(self) -> str:
        # SET NX then GET: of instances starting at once on a fresh store, the first one's.
        client = self._client()
        await client.set(self._id_key, secrets.token_hex(6), nx=True)
        return str(await client.get(self._id_key))


class RedisLivenessRecords:
    """``gateway.store.LivenessRecords`` on a TTL key per equipment and two hashes."""

    def __init__(self, keys: KeySchema, client: Client) -> None:
        self._keys = keys
        self._client = client
        self._last_seen = keys.global_key("equipment", "last-seen")
        self._gone = keys.global_key("equipment", "gone")

    def _online(self, equipment_id: str) -> str:
        return self._keys.global_key("equipment", "online", equipment_id)

    async def heartbeat(self, equipment_id: str, at: float, ttl_seconds: float) -> bool:
        async with self._client().pipeline(transaction=True) as pipe:
            # GET: the previous value, so exactly one instance sees it come back.
            ttl = max(1, round(ttl_seconds * 1000))
            pipe.set(self._online(equipment_id), repr(at), px=ttl, get=True)
            pipe.hset(self._last_seen, equipment_id, repr(at))
            pipe.hdel(self._gone, equipment_id)
            previous, *_ = await pipe.execute()
        return previous is None

    async def gone(self, equipment_id: str, at: float, reason: str) -> None:
        async with self._client().pipeline(transaction=True) as pipe:
            pipe.delete(self._online(equipment_id))
            pipe.hset(self._gone, equipment_id, json.dumps({"at": at, "reason": reason}))
            await pipe.execute()

    async def read(self, equipment_id: str) -> Liveness:
        async with self._client().pipeline(transaction=False) as pipe:
            pipe.exists(self._online(equipment_id))
            pipe.hget(self._last_seen, equipment_id)
            pipe.hget(self._gone, equipment_id)
            online, last_seen, gone = await pipe.execute()
        goodbye = json.loads(gone) if gone is not None else {}
        return Liveness(
            online=bool(online),
            last_seen=float(last_seen) if last_seen is not None else None,
            gone_at=goodbye.get("at"),
            gone_reason=goodbye.get("reason"),
        )


class RedisCommandLedger:
    """``gateway.store.CommandLedger`` on one key per command, with a TTL."""

    def __init__(self, keys: KeySchema, client: Client) -> None:
        self._keys = keys
        self._client = client

    def _key(self, correlation_id: str) -> str:
        return self._keys.global_key("equipment", "sent", correlation_id)

    async def sent(self, correlation_id: str, equipment_id: str, ttl_seconds: float) -> None:
        await self._client().set(
            self._key(correlation_id), equipment_id, px=max(1, round(ttl_seconds * 1000))
        )

    async def addressee(self, correlation_id: str) -> str | None:
        value = await self._client().get(self._key(correlation_id))
        return str(value) if value is not None else None

    async def answered(self, correlation_id: str) -> None:
        await self._client().delete(self._key(correlation_id))
