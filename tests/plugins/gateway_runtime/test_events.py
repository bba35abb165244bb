"""Keeping an equipment event nobody waits for yet (``gateway_runtime.events.KEEP``), on every
Redis deployment. Taking a kept event is the commit script's (``test_scripts``)."""

from __future__ import annotations

import pytest

from gateway.testing.redis_ha import redis_client
from gateway_runtime.events import KEEP

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_an_event_routed_again_is_kept_once(redis_url: str, unique: str) -> None:
    # Its handling failed after it was kept (a failover) and is tried again: a second copy
    # would be taken by a later wait of the same job.
    kept, note = f"{unique}:{{cell1}}:rt:unclaimed", f"{unique}:{{cell1}}:rt:kept:e1"
    async with redis_client(redis_url) as client:
        assert await client.eval(KEEP, 2, kept, note, "event-1 at t0", 100, 60) == 1
        assert await client.eval(KEEP, 2, kept, note, "event-1 at t1", 100, 60) == 0
        assert await client.lrange(kept, 0, -1) == ["event-1 at t0"]
        assert 0 < await client.ttl(note) <= 60


async def test_no_more_events_are_kept_than_the_setting_says(redis_url: str, unique: str) -> None:
    kept = f"{unique}:{{cell1}}:rt:unclaimed"
    async with redis_client(redis_url) as client:
        for number in range(4):
            note = f"{unique}:{{cell1}}:rt:kept:e{number}"
            assert await client.eval(KEEP, 2, kept, note, f"event-{number}", 3, 60) == 1
        assert await client.lrange(kept, 0, -1) == ["event-3", "event-2", "event-1"]
