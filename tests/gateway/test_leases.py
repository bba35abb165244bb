"""``gateway.leases.Lease`` on real Redis: one holder, the same holder back after a restart."""

from __future__ import annotations

import pytest

from gateway.leases import Lease
from gateway.store import KeySchema
from gateway.testing.redis_ha import redis_client

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


class ClientStore:
    def __init__(self, client: object, prefix: str) -> None:
        self.client = client
        self.keys = KeySchema(prefix)


async def test_one_holder_at_a_time_and_the_same_holder_comes_back(
    redis_url: str, unique: str
) -> None:
    async with redis_client(redis_url) as client:
        store = ClientStore(client, unique)
        key = store.keys.global_key("lease")
        first = Lease(store, key, "a 1", 30, holder_prefix="a ")  # type: ignore[arg-type]
        other = Lease(store, key, "b 1", 30, holder_prefix="b ")  # type: ignore[arg-type]
        restarted = Lease(store, key, "a 2", 30, holder_prefix="a ")  # type: ignore[arg-type]
        no_prefix = Lease(store, key, "c 1", 30)  # type: ignore[arg-type]
        assert await first.acquire()
        assert first.valid
        assert not await other.acquire()
        assert not await no_prefix.acquire()  # no prefix never matches another's token
        assert await restarted.acquire()  # the same instance id, after a restart
        await first.release()  # no longer its token: nothing happens
        assert await client.get(key) == "a 2"
        await restarted.release()
        assert not restarted.valid
        assert await other.acquire()
