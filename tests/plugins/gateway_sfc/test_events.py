"""Claiming a kept equipment event (``gateway_sfc.events.CLAIM``) on every Redis deployment."""

from __future__ import annotations

import pytest

from gateway.testing.redis_ha import redis_client
from gateway_sfc.events import CLAIM

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_a_claim_sent_again_is_still_its_owners_and_no_one_elses(
    redis_url: str, unique: str
) -> None:
    # A client retries a claim whose answer the connection lost (a failover): the event was
    # taken by the first; the second must not make it nobody's.
    kept, note = f"{unique}:{{cell1}}:sfc:unclaimed", f"{unique}:{{cell1}}:sfc:claimed:e1"
    async with redis_client(redis_url) as client:
        await client.lpush(kept, "event-1", "event-2")
        assert await client.eval(CLAIM, 2, kept, note, "event-1", "J1", 60) == 1
        assert await client.eval(CLAIM, 2, kept, note, "event-1", "J1", 60) == 1  # sent again
        assert await client.eval(CLAIM, 2, kept, note, "event-1", "J2", 60) == 0  # taken
        assert await client.lrange(kept, 0, -1) == ["event-2"]
        assert 0 < await client.ttl(note) <= 60
