"""The redis-py client for each deployment ``redis.url`` can name (see ``topology``).

Every client decodes replies and speaks RESP2, whatever the deployment, so plugins using
``store.client`` see the same reply shapes on one node, behind Sentinel and on a Cluster.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, TypeVar, cast

import anyio
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import (
    AbstractStrategy,
    ClusterNode,
    ClusterPipeline,
    RedisCluster,
    TransactionStrategy,
)
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError, RedisError, WatchError

from gateway_redis.connection import LeanBlockingPool, LeanConnection
from gateway_redis.settings import (
    RedisSettings,
    connection_options,
    connection_url,
    tls_options,
)
from gateway_redis.topology import Topology

T = TypeVar("T")


class SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """The master's pool behind Sentinel, bounded the way the single-node pool is: work beyond
    ``max_connections`` waits for a free connection (``timeout``) instead of failing at once.

    Connections ask the Sentinels for the master when they connect, and drop themselves when
    that node answers READONLY (it was demoted), so a failover needs no restart.
    """


class FailoverRedis(Redis):
    """The client of one node or of the master behind Sentinel, with the lost connections
    of a killed server named as such (``connection_errors_named``)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        with connection_errors_named():
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        pipeline = super().pipeline(transaction, shard_hint)
        execute = pipeline.execute

        async def named_execute(*args: Any, **kwargs: Any) -> Any:
            with connection_errors_named():
                return await execute(*args, **kwargs)

        pipeline.execute = named_execute  # type: ignore[method-assign]
        return pipeline


class BoundedRedisCluster(RedisCluster):
    """A Cluster client that, like the single-node pool, makes work beyond ``max_connections``
    commands in flight wait (up to ``pool_timeout``) instead of failing at once: redis-py's
    Cluster nodes raise as soon as their connections run out. The bound is on the whole
    client, so no node ever runs out."""

    def __init__(self, *, max_connections: int, pool_timeout: float, **options: Any) -> None:
        super().__init__(max_connections=max_connections, **options)
        # redis-py (8.1) hands a transaction's reply parsers the key names the commands were
        # routed by, which most parsers do not take (HGETALL in MULTI fails): they are dropped.
        for name, parse in list(self.response_callbacks.items()):
            self.response_callbacks[name] = _without_keys(parse)
        self._in_flight = anyio.Semaphore(max_connections)
        self._pool_timeout = pool_timeout

    @asynccontextmanager
    async def _connection_slot(self) -> AsyncIterator[None]:
        with anyio.move_on_after(self._pool_timeout):
            await self._in_flight.acquire()
            try:
                with connection_errors_named():
                    yield
            finally:
                self._in_flight.release()
            return
        raise MaxConnectionsError("No connection available.")

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self._connection_slot():
            return await super().execute_command(*args, **kwargs)

    async def ping(self, **kwargs: Any) -> bool:
        """Whether every master answers (redis-py asks one node): while a killed master's
        slots wait for a replica to take over, the store is not ready."""
        kwargs.setdefault("target_nodes", self.PRIMARIES)
        return bool(await super().ping(**kwargs))

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipeline = super().pipeline(transaction, shard_hint)
        if transaction:
            pipeline._execution_strategy = CommitOnceTransaction(pipeline)
        execute = pipeline.execute

        async def bounded_execute(*args: Any, **kwargs: Any) -> Any:
            async with self._connection_slot():
                return await execute(*args, **kwargs)

        pipeline.execute = bounded_execute  # type: ignore[method-assign]
        queue = pipeline.execute_command

        def named_queue(*args: Any, **kwargs: Any) -> Any:
            with connection_errors_named():
                return queue(*args, **kwargs)

        pipeline.execute_command = named_queue  # type: ignore[method-assign]
        return pipeline


class CommitOnceTransaction(TransactionStrategy):
    """redis-py's Cluster transaction, except that a commit never goes without its WATCH,
    and WATCH and queuing happen in the gateway's event loop.

    redis-py (8.1) loses the WATCH of a Cluster transaction in two ways during a failover,
    and then commits blindly, over whatever another instance wrote meanwhile (a job stored
    again over the one that ran, a job's end recorded twice):

    - a command that meets CLUSTERDOWN (or keeps meeting MOVED) closes every connection of
      the client, the WATCHing one included, and the EXEC then reconnects without a word;
    - a connection lost during EXEC sends MULTI...EXEC again on a new connection, which has
      no WATCH (and when the killed master had executed the first EXEC and replicated it
      without answering, the same writes are made twice).

    Here the connection that holds the WATCH refuses to reconnect, and a lost connection is
    the caller's to handle, the way redis-py handles it on one node: watching, it raises
    ``WatchError`` (the compare-and-swap reads again and decides on what is stored, which
    shows a commit that did happen); not watching, the connection error, as is. Only a
    transaction the server refused unexecuted (MOVED/ASK, EXECABORT) is sent again.

    redis-py also sends WATCH and queues every command from a thread with an event loop of
    its own (its queuing is synchronous), relearning the topology there first when it is due:
    the client's lock then refuses that loop ("bound to a different event loop", for as long
    as the relearning takes), and connections opened there outlive their loop. Here WATCH is
    awaited in the caller's loop, and a command is queued at once when its slot is known
    without asking the server (any command whose keys are where the command table says).
    """

    async def watch(self, *names: Any) -> Any:
        """WATCH, in the gateway's event loop (see the class)."""
        if self._explicit_transaction:
            raise RedisError("Cannot issue a WATCH after a MULTI")
        cluster = self._pipe.cluster_client
        if cluster._initialize:
            await cluster.initialize()
        slot = await cluster._determine_slot("WATCH", *names)
        if self._pipeline_slots and slot not in self._pipeline_slots:
            raise RedisError("Cannot watch keys of different slots")
        self._validate_watch()  # type: ignore[no-untyped-call]
        self._pipeline_slots.add(slot)
        return await self._immediate_execute_command("WATCH", *names)  # type: ignore[no-untyped-call]

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """Queue a command of the transaction without redis-py's thread (see the class) when
        its slot is known without asking the server; else redis-py's way."""
        immediate = self._watching or args[0] in self.IMMEDIATE_EXECUTE_COMMANDS
        if self._explicit_transaction or not immediate:
            slot = _without_waiting(self._pipe.cluster_client._determine_slot(*args))
            if slot is not None:
                self._pipeline_slots.add(slot)
                return AbstractStrategy.execute_command(self, *args, **kwargs)
        return super().execute_command(*args, **kwargs)

    async def _execute_transaction_with_retries(
        self, stack: list[Any], raise_on_error: bool
    ) -> Any:
        watching = self._watching
        failures = 0
        while True:
            try:
                with connection_errors_named(), self._watch_kept(watching):
                    return await self._execute_transaction(stack, raise_on_error)
            except self.SLOT_REDIRECT_ERRORS as error:
                failures += 1
                # Relearns the slot; raises WatchError itself when keys are watched.
                await self._reinitialize_on_error(error, failures)  # type: ignore[no-untyped-call]
                if watching or failures > self._retry.get_retries():
                    raise
            except self.CONNECTION_ERRORS as error:
                # Drops the connection (and the WATCH with it), relearns the slots in time.
                await self._reinitialize_on_error(error, failures + 1)  # type: ignore[no-untyped-call]
                if watching:
                    raise WatchError(
                        f"connection lost at the commit ({error}): "
                        "it may or may not have happened; read again"
                    ) from error
                raise

    @contextmanager
    def _watch_kept(self, watching: bool) -> Iterator[None]:
        """While the commit is sent, the WATCHing connection raises instead of reconnecting."""
        connection = self._transaction_connection
        if not watching:
            yield
            return
        if connection is None:  # a new one would commit without the WATCH
            raise RedisConnectionError("the connection holding the WATCH is gone")

        async def refuse(*args: Any, **kwargs: Any) -> None:
            raise RedisConnectionError("the connection holding the WATCH was closed meanwhile")

        connection.connect_check_health = refuse  # type: ignore[method-assign]
        try:
            yield
        finally:
            del connection.connect_check_health  # the class's own again


def _without_waiting(work: Coroutine[Any, Any, T]) -> T | None:
    """The result of ``work`` when it finishes without waiting for anything; else ``None``
    (it is closed unfinished)."""
    try:
        work.send(None)
    except StopIteration as finished:
        return cast(T, finished.value)
    work.close()
    return None


@contextmanager
def connection_errors_named() -> Iterator[None]:
    """A write on a connection the server (killed in a failover) closed meanwhile leaks the
    event loop's transport internals from redis-py 8.1 instead of a ``ConnectionError``:
    asyncio's (``'NoneType' object has no attribute 'writelines'``, ``'NoneType' object is not
    callable``; redis/redis-py#4287) or uvloop's (``unable to perform operation on
    <TCPTransport closed=True ...>; the handler is closed``). Raised as what it is, so it is
    retried like any lost connection (as something else, the work that met it was dropped as
    failed: an equipment event, say)."""
    try:
        yield
    except (AttributeError, TypeError) as error:
        if "'NoneType' object" not in str(error):
            raise
        raise RedisConnectionError(f"connection lost while sending: {error}") from error
    except RuntimeError as error:
        if _UVLOOP_CLOSED.search(str(error)):
            raise RedisConnectionError(f"connection lost while sending: {error}") from error
        # redis-py 8.1 queues a command of a Cluster transaction by running the client's
        # re-initialisation (after a failover) in a thread with an event loop of its own,
        # whose lock then refuses the gateway's loop: the topology is being relearned.
        if "bound to a different event loop" not in str(error):
            raise
        raise RedisConnectionError(f"cluster topology being relearned: {error}") from error


# uvloop's UVHandle._ensure_alive, on a write to a transport that was closed.
_UVLOOP_CLOSED = re.compile(r"^unable to perform operation on <\w+ closed=True\b")


def _without_keys(parse: Callable[..., Any]) -> Callable[..., Any]:
    def parse_reply(response: Any, keys: Any = None, **options: Any) -> Any:
        return parse(response, **options)

    return parse_reply


async def connect(settings: RedisSettings, options: dict[str, Any], stack: AsyncExitStack) -> Redis:
    """A client for ``settings.url`` (not the embedded server); ``stack`` closes what else
    it opened (the Sentinel connections) after the client."""
    deployment = settings.deployment
    pool_options: dict[str, Any] = {
        "max_connections": settings.max_connections,
        "timeout": settings.pool_timeout_seconds,
    }
    credentials = connection_options(settings)
    if deployment.topology is Topology.SINGLE:
        # redis:// on LeanConnection; rediss:// and unix:// keep their own (the URL decides).
        pool = LeanBlockingPool.from_url(
            connection_url(settings),
            connection_class=LeanConnection,
            **pool_options,
            **options,
            **credentials,
        )
        return FailoverRedis.from_pool(pool)
    if deployment.topology is Topology.SENTINEL:
        sentinel_options: dict[str, Any] = {
            "socket_connect_timeout": options["socket_connect_timeout"],
            "decode_responses": True,
            "protocol": 2,
        }
        if settings.sentinel_username:
            sentinel_options["username"] = settings.sentinel_username
        if settings.sentinel_password is not None:
            sentinel_options["password"] = settings.sentinel_password.reveal()
        if settings.uses_tls:
            sentinel_options |= {"ssl": True, **tls_options(settings)}
            credentials |= {"ssl": True}
        sentinel = Sentinel(  # type: ignore[no-untyped-call]  # untyped in redis-py
            list(deployment.nodes), sentinel_kwargs=sentinel_options
        )
        stack.push_async_callback(sentinel.aclose)
        return cast(
            Redis,
            sentinel.master_for(
                deployment.service,
                redis_class=FailoverRedis,
                connection_pool_class=SentinelBlockingPool,
                **pool_options,
                **options,
                **credentials,
            ),
        )
    if settings.uses_tls:
        credentials |= {"ssl": True}
    cluster = BoundedRedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in deployment.nodes],
        max_connections=settings.max_connections,
        pool_timeout=settings.pool_timeout_seconds,
        **options,
        **credentials,
    )
    await cluster.initialize()
    # The Cluster client takes the same commands, scripts and (one-slot) transactions as
    # ``Redis``; the store contract allows plugins only what works on both.
    return cast(Redis, cluster)
