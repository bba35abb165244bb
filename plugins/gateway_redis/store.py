"""The Redis store: connection, JSON documents, per-scope transactions, scope discovery.

The client speaks RESP2 and decodes replies (``decode_responses=True``): every value the gateway
stores is text (JSON documents, stream fields), so plugins using ``store.client`` get ``str``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
from redis.asyncio import BlockingConnectionPool, Redis, UnixDomainSocketConnection
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.changes import ChangeRecord
from gateway.cloudevents import format_time, utc_now
from gateway.errors import ConnectionFailed, GatewayError, SettingsError
from gateway.store import STORE_SCHEMA, KeySchema, StreamBatch, check_scope
from gateway_redis.clients import connect, connection_errors_named
from gateway_redis.dedupe import RedisDeduplicator
from gateway_redis.embedded import EmbeddedRedis
from gateway_redis.guarded import Batch, Writes
from gateway_redis.jsondoc import dumps, loads
from gateway_redis.presence import (
    RedisCommandLedger,
    RedisInstanceTable,
    RedisLivenessRecords,
)
from gateway_redis.settings import RedisSettings, connection_options, masked_url
from gateway_redis.streams import StreamReader
from gateway_redis.topology import Topology
from gateway_redis.usage import memory_budget

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

log = logging.getLogger(__name__)

# Register a scope and announce it on the global stream, once: both keys are in the ``_global``
# slot, so this is one atomic step on Redis Cluster too. KEYS[1] set of scopes, KEYS[2] global
# change stream; ARGV[1] scope, ARGV[2] timestamp, ARGV[3] approximate stream length.
DISCOVER = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'scope', ARGV[1], 'ts', ARGV[2])
  return 1
end
return 0
"""


# How a TLS server that requires a client certificate turns away a client without one: the
# TLS 1.3 alert, or a dropped connection when the alert does not make it through first.
_NO_CLIENT_CERTIFICATE = ("CERTIFICATE_REQUIRED", "reset by peer", "Connection closed by server")


def _now() -> str:
    return format_time(utc_now())


class RedisScopeTransaction:
    """``gateway.store.ScopeTransaction``: writes to one scope, collected, committed as one
    guarded script call (``gateway_redis.guarded``).

    The watched keys are read when the transaction begins, in one MGET (none when the caller
    knows their texts: ``known``), and the commit checks that each still holds what was read or
    known: another instance's change to any of them fails it (``WatchError``), the way WATCH
    did, in the one round trip of the commit. Reads of other keys (``get_json``) happen at once
    and are not guarded.
    """

    def __init__(
        self,
        store: RedisStore,
        scope: str,
        *,
        watched: Mapping[str, str | None],
    ):
        self.scope = scope
        self.changed = False  # a change record was queued: the scope must be discoverable
        self.batch = Batch()
        self._store = store
        self._watched = dict(watched)  # what the guards compare
        self._texts = dict(watched)  # what the commit leaves
        for key, text in watched.items():
            self.batch.same_text(key, text)
        self.pipeline = Writes(self.batch, self._check, self._wrote)

    @property
    def texts(self) -> Mapping[str, str | None]:
        return self._texts

    def _check(self, key: str) -> None:
        self._store.check_key(self.scope, key)

    def _wrote(self, key: str, text: str | None) -> None:
        if key in self._texts:
            self._texts[key] = text

    def set_json(self, key: str, value: Any, *, ttl_seconds: int | None = None) -> None:
        self.pipeline.set(key, dumps(value), ex=ttl_seconds)

    def require_fewer(self, key: str, limit: int) -> None:
        self._check(key)
        self.batch.fewer_than(key, limit)

    def append_change(self, record: ChangeRecord) -> None:
        if record.scope != self.scope:
            raise ValueError(f"a change record of scope {record.scope!r} in {self.scope!r}")
        fields = {"ts": _now(), **record.fields()}
        self.pipeline.xadd(
            self._store.keys.changes(self.scope),
            fields,
            maxlen=self._store.settings.change_stream_maxlen,
            approximate=True,
        )
        self.changed = True

    async def get_json(self, key: str) -> Any:
        """The document at ``key``: as watched, else now."""
        (document,) = await self.get_json_many([key])
        return document

    async def get_json_many(self, keys: Sequence[str]) -> list[Any]:
        """The documents at ``keys``, in one round trip (none when every key is watched)."""
        for key in keys:
            self._check(key)
        if all(key in self._watched for key in keys):
            return [loads(self._watched[key]) for key in keys]
        texts = await self._store.client.mget(keys)
        return [loads(self._watched.get(key, text)) for key, text in zip(keys, texts, strict=True)]


class RedisStore:
    """``gateway.store.Store`` on Redis (or on an embedded redis-server when no URL is set)."""

    def __init__(self, settings: RedisSettings, data_dir: Path) -> None:
        self.settings = settings
        self.keys = KeySchema(prefix=settings.key_prefix)
        self.dedupe = RedisDeduplicator(
            self.keys,
            lease_seconds=settings.dedupe_lease_seconds,
            ttl_seconds=settings.dedupe_ttl_seconds,
        )
        self.instances = RedisInstanceTable(self.keys, lambda: self.client)
        self.liveness = RedisLivenessRecords(self.keys, lambda: self.client)
        self.commands = RedisCommandLedger(self.keys, lambda: self.client)
        self.embedded = (
            EmbeddedRedis(
                data_dir / "redis",
                maxmemory_mb=settings.embedded_maxmemory_mb,
                eviction=settings.embedded_eviction,
            )
            if settings.embedded
            else None
        )
        self._client: Redis | None = None
        self._closing = AsyncExitStack()  # what the client needs besides (Sentinel connections)
        self.streams = StreamReader(
            lambda: self.client,
            clustered=settings.deployment.topology is Topology.CLUSTER,
            poll_ms=settings.cluster_poll_ms,
        )
        self._discover: AsyncScript | None = None
        self._scripts: dict[str, tuple[str, str]] = {}  # commit scripts: source -> (source, sha)
        self._registered: set[str] = set()  # scopes this process has already made discoverable

    @property
    def address(self) -> str:
        """Where the store connects, safe to print (no password)."""
        if self.embedded is not None:
            return f"embedded Redis in {self.embedded.directory}"
        return masked_url(self.settings.url)

    @property
    def client(self) -> Redis:
        if self._client is None:
            raise GatewayError("the Redis store is not entered (use 'async with store')")
        return self._client

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> RedisStore:
        try:
            self._client = await self._connect()
            await self._verify(self._client)
            await self._check_schema(self._client)
        except BaseException:
            await self._close()
            raise
        self._discover = self._client.register_script(DISCOVER)
        self.dedupe.attach(self._client)
        log.info("Redis store connected to %s (key prefix %r)", self.address, self.keys.prefix)
        if self.embedded is None:
            await self._check_eviction(self._client)
        return self

    async def _check_eviction(self, client: Redis) -> None:
        """Say so at start when the server may evict live state at its memory budget."""
        try:
            maxmemory, policy = await memory_budget(client)
        except (RedisError, OSError) as error:  # a Cluster, a proxy: not worth stopping for
            log.debug("cannot read the memory budget of %s: %s", self.address, error)
            return
        if maxmemory and policy is not None and policy.startswith("allkeys-"):
            log.warning(
                "Redis at %s evicts any key when its memory is full (maxmemory-policy %s): "
                "it may drop jobs, queues and streams; use a volatile-* policy, which evicts "
                "only what retention keeps (keys with a TTL), or noeviction",
                self.address,
                policy,
            )

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _connect(self) -> Redis:
        """A client on a bounded, blocking pool: at most ``redis.max_connections`` at once.

        Work beyond that waits for a free connection (up to ``redis.pool_timeout_seconds``,
        then a transient "No connection available" error its caller retries) instead of
        failing at once the way redis-py's default pool does when it runs out.
        """
        options = self._client_options()
        if self.embedded is not None:
            socket = await anyio.to_thread.run_sync(self.embedded.start)
            pool = BlockingConnectionPool(
                connection_class=UnixDomainSocketConnection,
                path=socket,
                max_connections=self.settings.max_connections,
                timeout=self.settings.pool_timeout_seconds,
                **options,
            )
            return Redis.from_pool(pool)
        self._check_tls_files()
        return await connect(self.settings, options, self._closing)

    def _check_tls_files(self) -> None:
        """Name the setting of a TLS file that cannot be read (redis-py would not)."""
        if not self.settings.uses_tls:
            return
        for key in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
            name = getattr(self.settings, key)
            if not name:
                continue
            try:
                Path(name).open("rb").close()
            except OSError as error:
                raise SettingsError(
                    f"redis.{key}", f"cannot read {name!r}: {error.strerror or error}"
                ) from None

    def _client_options(self) -> dict[str, Any]:
        return {
            "decode_responses": True,
            # RESP2 whatever redis-py defaults to (8.x: RESP3), so reply shapes never change
            # under the plugins that use ``store.client``.
            "protocol": 2,
            "socket_connect_timeout": self.settings.connect_timeout_seconds,
        }

    async def _verify(self, client: Redis) -> None:
        """PING once, so a wrong address or password stops start-up with a clear message."""
        try:
            await client.ping()
        except (RedisError, OSError) as error:
            # ``from None``: the message is the whole story, and it never shows the password.
            reason = self._scrub(str(error))
            settings = self.settings
            if (
                settings.uses_tls
                and not settings.tls_cert_file
                and any(sign in reason for sign in _NO_CLIENT_CERTIFICATE)
            ):
                reason += " (does the server require a client certificate? redis.tls_cert_file)"
            message = f"cannot connect to Redis at {self.address}: {reason}"
            raise ConnectionFailed("redis.url", message) from None

    async def _check_schema(self, client: Redis) -> None:
        """Refuse a store another version of the gateway wrote in another layout: its jobs
        would be neither run nor cleaned up. A store with no schema key is new (then it gets
        ours), or from before the key existed (schema 1: it has scopes)."""
        key = self.keys.schema()
        stored = cast(str | None, await client.get(key))  # the client decodes responses
        if stored is None:
            if not await client.exists(self.keys.scopes()):
                await client.set(key, STORE_SCHEMA, nx=True)
                return
            stored = "1"
        if stored != str(STORE_SCHEMA):
            prefix = self.keys.prefix
            raise GatewayError(
                f"the store at {self.address} holds data of store schema {stored} under key "
                f"prefix {prefix!r}; this gateway writes schema {STORE_SCHEMA}: let its jobs end "
                f"under the version that wrote them, then delete the keys '{prefix}:*' (or set "
                f"another redis.key_prefix) and start again"
            )

    def _scrub(self, text: str) -> str:
        password = connection_options(self.settings).get("password")
        return text.replace(password, "********") if password else text

    async def _close(self) -> None:
        # Shielded: a cancelled shutdown must still close the connections and stop the server.
        with anyio.CancelScope(shield=True):
            self.dedupe.detach()
            self._discover = None
            client, self._client = self._client, None
            if client is not None:
                await client.aclose()
            await self._closing.aclose()
            if self.embedded is not None:
                await anyio.to_thread.run_sync(self.embedded.stop)

    async def ping(self) -> bool:
        """True when the server answers within the connect timeout; never raises."""
        if self._client is None:
            return False
        with anyio.move_on_after(self.settings.connect_timeout_seconds):
            try:
                return bool(await self._client.ping())
            except (RedisError, OSError):
                return False
        return False

    # -- documents ------------------------------------------------------------------------------

    async def get_json(self, key: str) -> Any:
        return loads(await self.client.get(key))

    async def set_json(self, key: str, value: Any, *, ttl_seconds: int | None = None) -> None:
        await self.client.set(key, dumps(value), ex=ttl_seconds)

    # -- transactions ---------------------------------------------------------------------------

    def check_key(self, scope: str, key: str) -> None:
        """A scope transaction touches only its scope's keys (one slot on Redis Cluster)."""
        if not key.startswith(self.keys.scoped(scope) + ":"):
            raise ValueError(f"key {key!r} does not belong to scope {scope!r}")

    @asynccontextmanager
    async def transaction(
        self,
        scope: str,
        *,
        watch: Sequence[str] = (),
        known: Mapping[str, str | None] | None = None,
    ) -> AsyncIterator[RedisScopeTransaction]:
        """Collect writes to ``scope``; they commit with their change records on a clean exit,
        as one script call (``gateway_redis.guarded``).

        An exception in the block discards everything. With ``watch`` keys, a change to any of
        them by someone else (since they were read, or from the text ``known`` says they hold)
        makes the commit raise ``redis.exceptions.WatchError`` and write nothing: the caller
        reads again and retries. So does a connection lost during the commit (it may then have
        happened: what is read again shows it).
        """
        check_scope(scope)
        for key in watch:
            self.check_key(scope, key)
        known = known or {}
        unread = [key for key in watch if key not in known]
        texts = cast(list[str | None], await self.client.mget(unread)) if unread else []
        watched = {key: known[key] for key in watch if key in known}
        watched.update(zip(unread, texts, strict=True))
        transaction = RedisScopeTransaction(self, scope, watched=watched)
        yield transaction
        await self._commit(transaction.batch)
        if transaction.changed:
            await self._make_discoverable(scope)

    async def _commit(self, batch: Batch) -> None:
        if batch.empty:
            return  # nothing to write: nothing the guards protect
        source = batch.source()
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = (source, hashlib.sha1(source.encode()).hexdigest())
        keys, args = batch.arguments()
        if batch.guarded:
            reply = await _send_once(self.client, script, keys, args)
        else:  # no guard: sent again after a lost connection, as redis-py does (idempotent)
            reply = await self._run_script(script, keys, args)
        if int(reply[0]) != 1:
            raise WatchError(f"{reply[1]} changed since it was read")

    async def _run_script(self, script: tuple[str, str], keys: list[str], args: list[str]) -> Any:
        source, sha = script
        try:
            return await self.client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self.client.eval(source, len(keys), *keys, *args)

    # -- scope discovery ------------------------------------------------------------------------

    async def _make_discoverable(self, scope: str) -> None:
        """Add ``scope`` to the set of scopes and, the first time, to the global stream.

        Runs after the scope's own commit (a cross-slot step cannot join it). A failure here
        must not report the committed write as failed: it is logged and retried on the next
        write, and readers reconcile from ``reconcile_scopes`` at start.
        """
        if scope in self._registered or self._discover is None:
            return
        keys = [self.keys.scopes(), self.keys.global_changes()]
        try:
            await self._discover(
                keys=keys, args=[scope, _now(), self.settings.change_stream_maxlen]
            )
        except RedisError as error:
            log.warning("scope %s not yet registered as discoverable: %s", scope, error)
            return
        self._registered.add(scope)

    async def read_streams(
        self,
        streams: Mapping[str, str],
        *,
        group: tuple[str, str] | None = None,
        count: int | None = None,
        block_ms: int | None = None,
    ) -> list[StreamBatch]:
        """Streams of any scopes: one blocking read, or pipelined reads on a Cluster."""
        return await self.streams.read(streams, group=group, count=count, block_ms=block_ms)

    async def known_scopes(self) -> set[str]:
        """Every scope that has had a state write (the set readers start from), and every one
        this process wrote to: the set goes when the store loses its data, and the publisher
        must still tell the MES what is left of those scopes (nothing, perhaps)."""
        members = cast(set[str], await self.client.smembers(self.keys.scopes()))
        return members | self._registered  # decode_responses: members are str

    async def reconcile_scopes(self) -> set[str]:
        """``known_scopes`` plus any scope whose change stream exists but was never registered.

        Covers a crash between a scope's first commit and its registration. It scans the
        key space, so readers call it once at start, not per write.
        """
        known = await self.known_scopes()
        pattern = _glob_escape(self.keys.prefix) + ":{*}:changes"
        async for key in self.client.scan_iter(match=pattern, _type="stream", count=1000):
            scope = _scope_of_changes(self.keys, key)
            if scope is not None and scope not in known:
                await self._make_discoverable(scope)
                known.add(scope)
        return known


async def _send_once(
    client: Redis, script: tuple[str, str], keys: list[str], args: list[str]
) -> Any:
    """Run a guarded commit, never sending it twice: a commit sent again after a lost
    connection (redis-py's retry) could apply twice when the first one did apply, unseen. A lost
    connection raises ``WatchError`` instead: the caller reads again, which shows whether the
    commit happened, and decides again."""
    source, sha = script
    if isinstance(cast(object, client), RedisCluster):
        return await _send_once_on_cluster(client, source, sha, keys, args)
    pool = client.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        with connection_errors_named():
            try:
                return await _call(connection, "EVALSHA", sha, len(keys), *keys, *args)
            except NoScriptError:  # a restarted server: the script, not yet run, in full
                return await _call(connection, "EVAL", source, len(keys), *keys, *args)
    except (RedisConnectionError, RedisTimeoutError, OSError) as error:
        await connection.disconnect()
        raise WatchError(
            f"connection lost at the commit ({error}): it may or may not have happened; read again"
        ) from error
    except BaseException:
        # A reply left unread (cancelled while waiting for it) must not reach the next user.
        with anyio.CancelScope(shield=True):
            await connection.disconnect()
        raise
    finally:
        await pool.release(connection)


async def _call(connection: Any, *command: Any) -> Any:
    await connection.send_command(*command)
    return await connection.read_response()


async def _send_once_on_cluster(
    client: Redis, source: str, sha: str, keys: list[str], args: list[str]
) -> Any:
    """On a Cluster, in a one-command MULTI/EXEC: its transaction never sends a commit again
    after a lost connection (``clients.CommitOnceTransaction``), and follows MOVED."""
    for command in (("EVALSHA", sha), ("EVAL", source)):
        pipeline = client.pipeline(transaction=True)
        pipeline.execute_command(*command, len(keys), *keys, *args)
        try:
            (reply,) = await pipeline.execute()
            return reply
        except NoScriptError:
            continue
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise WatchError(
                f"connection lost at the commit ({error}): it may or may not have happened; "
                "read again"
            ) from error
    raise GatewayError("the commit script could not be loaded")


def _scope_of_changes(keys: KeySchema, key: str) -> str | None:
    """The scope whose change stream ``key`` is; ``None`` for the global stream or a stranger."""
    scope = key[len(keys.prefix) + 2 : -len("}:changes")]  # between "<prefix>:{" and "}:changes"
    try:
        is_changes = keys.changes(scope) == key
    except ValueError:  # not a valid scope name
        return None
    return scope if is_changes else None


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
