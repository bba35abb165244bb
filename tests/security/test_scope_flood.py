"""H5: equipment cannot make scopes. A thousand events (and replies) from an equipment login,
each naming a scope of its own in ``subject``, are refused (counted, logged once per topic
and minute): no key for any of those scopes, no new member of the set of scopes, nothing about
them on /metrics, while the MES is answered."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import to_mqtt
from gateway.testing import poll_until
from tests.security.station import EQUIPMENT_PREFIX, HostileStation, probing

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

EVENTS = 1000


async def test_equipment_naming_new_scopes_makes_none(hostile_station: HostileStation) -> None:
    station = hostile_station
    await station.start()
    redis = Redis.from_url(station.deployment.redis_url, decode_responses=True)
    async with redis, probing(station) as probe:
        await poll_until(lambda: _rounds(probe, 1))  # the real scope exists by now
        scopes_before = await redis.smembers(f"{station.name}:{{_global}}:scopes")
        async with station.deployment.client("tightener") as tightener:
            for number in range(EVENTS):
                kind = "events" if number % 2 else "replies"
                event = CloudEvent(
                    type="com.example.tightened.v1",
                    source="urn:tightener",
                    subject=f"evil{number}",
                    correlationid=None if kind == "events" else "J:a:1",
                    data={"torque": number},
                )
                await tightener.publish(to_mqtt(event, f"{EQUIPMENT_PREFIX}/tightener/{kind}"))
        await poll_until(lambda: _rejected_at_least(station, EVENTS), timeout=30, interval=0.2)
        evil_keys = [key async for key in redis.scan_iter(match=f"{station.name}:*evil*")]
        scopes_after = await redis.smembers(f"{station.name}:{{_global}}:scopes")
        _, _, metrics = await station.http("/metrics")
    assert evil_keys == []
    assert scopes_after == scopes_before
    assert b"evil" not in metrics
    log = station.log_text()
    assert log.count("unknown scope") <= 4  # once per topic and minute, not a thousand times


async def _rounds(probe: object, count: int) -> bool:
    return getattr(probe, "rounds", 0) >= count


async def _rejected_at_least(station: HostileStation, count: int) -> bool:
    return await station.metric("gateway_messages_failed_total") >= count
