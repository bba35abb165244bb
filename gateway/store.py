"""The store contract: the gateway keeps all its state in a **Redis-compatible server**.

There is no abstract backend to swap: ``gateway_make_store`` returns a ``Store`` over a server
that speaks the Redis protocol (Redis >= 6.2 or Valkey, no modules). That is one node (or the
embedded redis-server), a master watched by Redis Sentinel, or a Redis Cluster: the same
contract behind the same ``Store``. What callers may rely on, and must keep to:

- ``store.client`` is a connected ``redis.asyncio.Redis`` (``decode_responses=True``): plugins
  with their own data (job management, the SFC engine, the publisher) use Redis commands, Lua
  scripts, transactions and streams directly, with keys from ``store.keys``;
- every key of a scope carries the scope as a hash tag, ``{prefix}:{<scope>}:<name>``, and every
  multi-key operation (a script, a MULTI/EXEC, a scope transaction's commit, a multi-stream
  read) touches the keys of **one** scope, or of the pseudo-scope ``_global`` only, so it
  stays within one hash slot and runs unchanged on Redis Cluster;
- a read over the streams of many scopes goes through ``store.read_streams``, which makes it
  one blocking command on one node and one pipelined command per stream (one round trip per
  node, no connection per scope) on a Cluster;
- the host itself issues no Redis command: what it stores (de-duplication, which instances are
  alive, equipment liveness, where each command went) goes through the narrow protocols below
  (``store.dedupe``, ``store.instances``, ``store.liveness``, ``store.commands``), which the
  store plugin implements.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.changes import ChangeRecord
from gateway.cloudevents import CloudEvent
from gateway.errors import ValidationError

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.equipment import Liveness

GLOBAL_SCOPE = "_global"

STORE_SCHEMA = 2
"""The layout of everything the gateway keeps in the store (keys and document shapes), kept in
the store's ``KeySchema.schema`` key. Bumped when a change cannot read what the version before
wrote; a gateway refuses to start on a store of another schema (2: one recipe runtime for every
format, its keys under ``rt:``)."""

# One stream's entries as the decoding client returns them: (stream, [(entry id, fields)]);
# the fields are ``None`` for an entry deleted while it was pending.
StreamEntry = tuple[str, dict[str, str] | None]
StreamBatch = tuple[str, list[StreamEntry]]
_SCOPE = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")


def check_scope(scope: str) -> str:
    """A scope is a short name; braces would break the hash tag, so they are refused."""
    if not isinstance(scope, str) or not _SCOPE.match(scope):
        raise ValidationError(
            "subject", f"scope must be 1-128 letters, digits or _.-/ characters, got {scope!r}"
        )
    if scope == GLOBAL_SCOPE:
        raise ValidationError("subject", f"{GLOBAL_SCOPE!r} is reserved")
    return scope


@dataclass(frozen=True)
class KeySchema:
    """Names every key the gateway writes."""

    prefix: str = "gw"

    def scoped(self, scope: str, *parts: str) -> str:
        return ":".join((self.prefix, "{" + check_scope(scope) + "}", *parts))

    def global_key(self, *parts: str) -> str:
        """A key of no scope (``GLOBAL_SCOPE``, which ``check_scope`` refuses to callers)."""
        return ":".join((self.prefix, "{" + GLOBAL_SCOPE + "}", *parts))

    def changes(self, scope: str) -> str:
        """The scope's change stream: one record per state write, read by the publisher."""
        return self.scoped(scope, "changes")

    def global_changes(self) -> str:
        """Stream of scope discoveries, so a reader learns about new scopes without polling."""
        return self.global_key("scope-discoveries")

    def scopes(self) -> str:
        """Set of every scope that has had a state write."""
        return self.global_key("scopes")

    def schema(self) -> str:
        """The ``STORE_SCHEMA`` of what the store holds."""
        return self.global_key("schema")

    def dedupe(self, scope: str | None, digest: str) -> str:
        """De-duplication marker of an event (``scope`` None: the event named no valid scope)."""
        if scope is None:
            return self.global_key("dedupe", digest)
        return self.scoped(scope, "dedupe", digest)


@dataclass(frozen=True)
class Claim:
    """Outcome of claiming an incoming event for processing."""

    duplicate: bool = False  # processed before: ``replies`` are what was answered then
    busy: bool = False  # another handler holds the claim right now
    replies: Sequence[CloudEvent] = field(default_factory=tuple)

    @property
    def new(self) -> bool:
        return not self.duplicate and not self.busy


@dataclass(frozen=True)
class DoneMarker:
    """The write that makes an event a duplicate: ``text`` at ``key`` (a key of the event's
    scope, or of ``_global``) for ``ttl_seconds``."""

    key: str
    text: str
    ttl_seconds: int


class Deduplicator(Protocol):
    """CloudEvent de-duplication by (``source``, ``id``).

    A claim is a short lease while the event is handled; only ``complete`` makes it a
    duplicate marker. A handler that fails calls ``release``, and a crashed handler's lease runs
    out, so a message whose first delivery was not processed is never dropped as a duplicate.

    A handler whose effect is one scope transaction may write the marker in it (``done``
    gives the write, ``committed`` says it was committed): the effect and the marker then
    commit together, and ``complete`` with the same replies writes nothing more.
    """

    async def claim(self, event: CloudEvent) -> Claim: ...

    async def complete(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> None: ...

    async def release(self, event: CloudEvent) -> None: ...

    def done(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> DoneMarker:
        """The marker ``complete(event, replies)`` would write."""
        ...

    def committed(self, marker: DoneMarker) -> None:
        """``marker`` was written in a scope transaction: ``complete`` need not write it."""
        ...


class InstanceTable(Protocol):
    """When each gateway instance last said it is running (``gateway.instances`` reads it)."""

    async def beat(self, instance_id: str, at: float) -> None:
        """Record that ``instance_id`` runs, at Unix time ``at``."""
        ...

    async def leave(self, instance_id: str) -> bool:
        """Remove ``instance_id`` (it stopped, or another instance adopted what it left);
        ``False`` when it was not there, so of two that remove it at once one learns it lost."""
        ...

    async def seen(self) -> dict[str, float]:
        """Every recorded instance and the time of its last ``beat``."""
        ...

    async def store_id(self) -> str:
        """This store's identity: drawn once, the same for every instance on it, another on
        another store (or on this one once it lost its data). Topic-level safe."""
        ...


class LivenessRecords(Protocol):
    """Equipment liveness shared by every instance (``gateway.equipment`` keeps it here).

    Whether equipment is online is decided by the server's clock (a record with a time to
    live), so every instance sees the same; the times are those of the reporting instance.
    """

    async def heartbeat(self, equipment_id: str, at: float, ttl_seconds: float) -> bool:
        """Online now and for ``ttl_seconds``; clears an earlier departure. True when it was
        not online before: exactly one heartbeat (of all instances) sees it come back."""
        ...

    async def gone(self, equipment_id: str, at: float, reason: str) -> None:
        """Offline since ``at``, and why; the last heartbeat is kept."""
        ...

    async def read(self, equipment_id: str) -> Liveness: ...


class CommandLedger(Protocol):
    """Which equipment each command went to, until answered (``gateway.equipment`` checks a
    reply naming its sender against it, on whichever instance the reply arrives)."""

    async def sent(self, correlation_id: str, equipment_id: str, ttl_seconds: float) -> None:
        """The command ``correlation_id`` went to ``equipment_id``; forgotten after the TTL."""
        ...

    async def addressee(self, correlation_id: str) -> str | None:
        """The equipment the command went to, while it waits for its reply."""
        ...

    async def answered(self, correlation_id: str) -> None:
        """The reply is recorded: no second reply finds the command waiting."""
        ...


class WriteCommands(Protocol):
    """The write commands a scope transaction collects (redis-py's names and arguments), all
    on keys of its scope. They run at the commit, in order, after its guards."""

    def set(self, name: str, value: str, ex: int | None = None) -> None: ...

    def delete(self, *names: str) -> None: ...

    def expire(self, name: str, time: int) -> None: ...

    def sadd(self, name: str, *values: Any) -> None: ...

    def srem(self, name: str, *values: Any) -> None: ...

    def zadd(self, name: str, mapping: Mapping[str, float]) -> None: ...

    def zrem(self, name: str, *values: Any) -> None: ...

    def hset(
        self,
        name: str,
        key: str | None = None,
        value: Any = None,
        mapping: Mapping[str, Any] | None = None,
    ) -> None: ...

    def hdel(self, name: str, *keys: str) -> None: ...

    def xadd(
        self,
        name: str,
        fields: Mapping[str, Any],
        id: str = "*",  # redis-py's name
        maxlen: int | None = None,
        approximate: bool = True,
    ) -> None: ...

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> None:
        """What the Lua ``script`` does, run within the commit (it must not call EVAL)."""
        ...


class ScopeTransaction(Protocol):
    """Writes to one scope that commit together with their change record, atomically.

    The commit is one guarded script call: it writes only if every watched key still holds
    the text the transaction read (or was told it holds: ``Store.transaction``'s ``known``),
    and every ``require_fewer`` still holds; else it fails with ``redis.WatchError`` and writes
    nothing, as a WATCHed MULTI/EXEC would.
    """

    @property
    def scope(self) -> str: ...

    @property
    def pipeline(self) -> WriteCommands:
        """Queue further writes on this scope's keys (sent with the commit)."""
        ...

    @property
    def texts(self) -> Mapping[str, str | None]:
        """The watched keys' texts as the commit will leave them: as read (or known), then as
        the writes queued since (``set``/``set_json``, ``delete``) make them."""
        ...

    async def get_json(self, key: str) -> Any:
        """A watched key: as read when the transaction began (or known); another key: read
        now, unguarded. Neither sees the writes queued before it."""
        ...

    async def get_json_many(self, keys: Sequence[str]) -> list[Any]:
        """``get_json`` of each of ``keys``, in one round trip (none when all are watched)."""
        ...

    def set_json(self, key: str, value: Any, *, ttl_seconds: int | None = None) -> None: ...

    def require_fewer(self, key: str, limit: int) -> None:
        """Commit only if the sorted set at ``key`` then has fewer than ``limit`` members."""
        ...

    def append_change(self, record: ChangeRecord) -> None:
        """Append ``record`` (of this scope) to the scope's change stream, with the commit."""
        ...


class Store(Protocol):
    """The store handed to plugins through ``gateway.store``: a Redis-protocol server."""

    @property
    def keys(self) -> KeySchema: ...

    @property
    def dedupe(self) -> Deduplicator: ...

    @property
    def instances(self) -> InstanceTable: ...

    @property
    def liveness(self) -> LivenessRecords: ...

    @property
    def commands(self) -> CommandLedger: ...

    @property
    def client(self) -> Redis:
        """The connected client (``decode_responses=True``: values come back as ``str``).

        Keep every multi-key command within one scope's keys (see the module docstring).
        """
        ...

    async def __aenter__(self) -> Store: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def ping(self) -> bool:
        """True when the server answers."""
        ...

    async def get_json(self, key: str) -> Any:
        """The JSON document at ``key``, or ``None``."""
        ...

    async def set_json(self, key: str, value: Any, *, ttl_seconds: int | None = None) -> None: ...

    def transaction(
        self,
        scope: str,
        *,
        watch: Sequence[str] = (),
        known: Mapping[str, str | None] | None = None,
    ) -> AbstractAsyncContextManager[ScopeTransaction]:
        """Collect writes to ``scope``; they and the change records commit atomically on exit,
        in one round trip (one script call, whatever they write).

        With ``watch`` keys (strings, or no value), the commit fails with ``redis.WatchError``
        if any of them changed since the transaction began (optimistic compare-and-swap). Those
        not in ``known`` are read as it begins (one MGET); ``known`` gives the texts the caller
        believes the others hold (what it last wrote or read: ``None``, no value), not read: a
        wrong belief fails the commit like a change would. A connection lost during a guarded
        commit raises ``WatchError`` too (it may have happened: reading again shows it).
        """
        ...

    async def read_streams(
        self,
        streams: Mapping[str, str],
        *,
        group: tuple[str, str] | None = None,
        count: int | None = None,
        block_ms: int | None = None,
    ) -> list[StreamBatch]:
        """XREAD (or, with ``group`` = (group, consumer), XREADGROUP) over ``streams`` (key ->
        last id seen), which may belong to any number of scopes.

        Waits up to ``block_ms`` (0: for ever; ``None``: not at all) for a first entry. Only
        the streams with entries appear in the result.
        """
        ...

    async def known_scopes(self) -> set[str]:
        """Every scope that has had a state write."""
        ...

    async def reconcile_scopes(self) -> set[str]:
        """Register scopes whose discovery a crash interrupted; return every known scope."""
        ...


class KnownScopes:
    """Refuses what names a scope the store does not know: scopes come from the MES (its
    commands and configuration make them), never from what equipment says.

    An equipment event or reply whose ``subject`` names a scope no job ever ran in would
    otherwise make the recipe engine take that scope on (a work stream, a consumer group, an
    entry in the set of scopes, kept for ever). Scopes once known stay known here; one not known
    is looked up in the store each time (an attacker's thousand names cost a thousand small
    reads, and make nothing).
    """

    def __init__(self, store: Callable[[], Store | None]) -> None:
        self._store = store
        self._known: set[str] = set()

    async def check(self, scope: str | None) -> None:
        """Nothing if ``scope`` is ``None`` or known; ``ValidationError`` otherwise."""
        if scope is None or scope in self._known:
            return
        store = self._store()
        if store is None:  # no store: nothing is kept for any scope
            return
        self._known = await store.known_scopes()
        if scope not in self._known:
            raise ValidationError(
                "subject", f"unknown scope {scope[:128]!r}: no job of it is known here"
            )
