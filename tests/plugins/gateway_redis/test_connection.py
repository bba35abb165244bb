"""LeanConnection: the bytes redis-py would send, packed by hiredis and written without a task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError

from gateway.testing import poll_until
from gateway_redis.clients import FailoverRedis
from gateway_redis.connection import LeanBlockingPool, LeanConnection

arguments = st.one_of(
    st.text(),
    st.binary(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.binary().map(bytearray),
    st.binary().map(lambda data: memoryview(data)),
)


def redis_py_bytes(*args: Any) -> bytes:
    return b"".join(bytes(part) for part in Connection().pack_command(*args))


def lean_bytes(*args: Any) -> bytes:
    return b"".join(LeanConnection().pack_command(*args))


@given(st.lists(arguments, max_size=20))
def test_a_command_packs_to_the_bytes_redis_py_packs(values: list[Any]) -> None:
    assert lean_bytes("EVALSHA", *values) == redis_py_bytes("EVALSHA", *values)


def test_a_command_name_with_its_subcommand_is_split_as_redis_py_splits_it() -> None:
    assert lean_bytes("CONFIG GET", "maxmemory") == redis_py_bytes("CONFIG GET", "maxmemory")
    assert lean_bytes(b"CLIENT SETNAME", "x") == redis_py_bytes(b"CLIENT SETNAME", "x")


@pytest.mark.parametrize("value", [None, True, object()])
def test_what_redis_py_refuses_is_refused_the_same_way(value: Any) -> None:
    with pytest.raises(DataError, match="Invalid input of type"):
        Connection().pack_command("SET", "key", value)
    with pytest.raises(DataError, match="Invalid input of type"):
        LeanConnection().pack_command("SET", "key", value)


def test_another_encoding_is_packed_by_redis_py() -> None:
    connection = LeanConnection(encoding="latin-1")
    assert b"".join(connection.pack_command("SET", "k", "é")) == b"".join(
        Connection(encoding="latin-1").pack_command("SET", "k", "é")
    )


@pytest.mark.anyio
async def test_commands_and_pipelines_go_through_a_server(
    redis_single_url: str, unique: str
) -> None:
    pool = BlockingConnectionPool.from_url(
        redis_single_url, connection_class=LeanConnection, decode_responses=True, protocol=2
    )
    assert pool.connection_class is LeanConnection
    client: Redis = FailoverRedis.from_pool(pool)
    try:
        key = f"{unique}:lean"
        script = client.register_script("return {KEYS[1], ARGV[1], ARGV[2]}")
        assert await script(keys=[key], args=["é", 1.5]) == [key, "é", "1.5"]
        async with client.pipeline(transaction=True) as pipeline:
            pipeline.set(key, "v")
            pipeline.get(key)
            pipeline.delete(key)
            assert await pipeline.execute() == [True, "v", 1]
        # Many at once on few connections: each command's reply is its own.
        values = [str(index) for index in range(200)]
        replies = await asyncio.gather(*(client.echo(value) for value in values))
        assert replies == values
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_rediss_url_keeps_the_tls_connection() -> None:
    pool = BlockingConnectionPool.from_url(
        "rediss://127.0.0.1:1/0", connection_class=LeanConnection
    )
    assert pool.connection_class is not LeanConnection


@pytest.mark.anyio
async def test_commands_beyond_the_pools_connections_wait_their_turn(redis_single_url: str) -> None:
    pool = LeanBlockingPool.from_url(
        redis_single_url,
        connection_class=LeanConnection,
        max_connections=2,
        timeout=5,
        decode_responses=True,
        protocol=2,
    )
    client: Redis = FailoverRedis.from_pool(pool)
    try:
        values = [str(index) for index in range(300)]
        replies = await asyncio.gather(*(client.echo(value) for value in values))
        assert replies == values
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 2
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_command_finding_no_free_connection_in_time_fails_as_redis_py_says(
    redis_single_url: str, unique: str
) -> None:
    pool = LeanBlockingPool.from_url(
        redis_single_url, connection_class=LeanConnection, max_connections=1, timeout=0.2
    )
    client: Redis = FailoverRedis.from_pool(pool)
    try:
        blocked = asyncio.ensure_future(client.blpop([f"{unique}:never"], timeout=2))

        async def holds_the_only_connection() -> bool:
            return len(pool._in_use_connections) == 1

        await poll_until(holds_the_only_connection)
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await client.get(f"{unique}:x")
        assert await blocked is None  # its own wait ends; then the connection serves again
        assert await client.get(f"{unique}:x") is None
    finally:
        await client.aclose()
