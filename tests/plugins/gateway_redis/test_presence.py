"""The Redis side of the host's presence records: which instances are alive."""

from __future__ import annotations

import pytest

from gateway.app import Gateway
from gateway.instances import ALIVE_WITHIN_SECONDS, InstanceRegistry

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_instances_are_alive_while_they_beat_and_gone_when_they_leave_or_go_quiet(
    redis_url: str, unique: str
) -> None:
    environ = {"GATEWAY_PLUGINS_ALLOW": "redis", "GATEWAY_REDIS_URL": redis_url}
    environ["GATEWAY_REDIS_KEY_PREFIX"] = unique
    store = Gateway.from_environment(environ=environ).store
    assert store is not None
    clock = FakeClock()
    a = InstanceRegistry(store, "a", clock=clock)
    b = InstanceRegistry(store, "b", clock=clock)
    async with store:
        await a.beat()
        assert await a.alive() == {"a"}
        assert not await a.others_alive()
        await b.beat()
        assert await a.others_alive()
        clock.now += ALIVE_WITHIN_SECONDS - 1
        await a.beat()
        clock.now += 2  # b's last beat is now older than ALIVE_WITHIN_SECONDS
        assert await a.alive() == {"a"}
        await b.beat()
        await b.leave()
        assert await store.instances.seen() == {"a": clock.now - 2}
        assert await b.alive() == {"a"}
