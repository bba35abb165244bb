"""The redis-py client for each deployment ``redis.url`` can name (see ``topology``).

Every client decodes replies and speaks RESP2, whatever the deployment, so plugins using
``store.client`` see the same reply shapes on one node, behind Sentinel and on a Cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, cast

import anyio
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

from gateway_redis.settings import (
    RedisSettings,
    connection_options,
    connection_url,
    tls_options,
)
from gateway_redis.topology import Topology


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

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipeline = super().pipeline(transaction, shard_hint)
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


@contextmanager
def connection_errors_named() -> Iterator[None]:
    """A write on a connection the server (killed in a failover) closed meanwhile leaks
    asyncio's transport internals from redis-py 8.1 (``'NoneType' object has no attribute
    'writelines'``, ``'NoneType' object is not callable``; redis/redis-py#4287) instead of a
    ``ConnectionError``: raised as what it is, so it is retried like any lost connection."""
    try:
        yield
    except (AttributeError, TypeError) as error:
        if "'NoneType' object" not in str(error):
            raise
        raise RedisConnectionError(f"connection lost while sending: {error}") from error
    except RuntimeError as error:
        # redis-py 8.1 queues a command of a Cluster transaction by running the client's
        # re-initialisation (after a failover) in a thread with an event loop of its own,
        # whose lock then refuses the gateway's loop: the topology is being relearned.
        if "bound to a different event loop" not in str(error):
            raise
        raise RedisConnectionError(f"cluster topology being relearned: {error}") from error


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
        pool = BlockingConnectionPool.from_url(
            connection_url(settings), **pool_options, **options, **credentials
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
