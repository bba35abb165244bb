"""Scopes and their work streams' consumer groups, on real Redis and MQTT."""

from __future__ import annotations

import pytest

from gateway.testing import running
from gateway.testing.redis_ha import redis_client
from gateway_jobs.testing import final_response
from gateway_jobs.testing import state_texts as state_of
from tests.plugins.gateway_runtime.test_coordination import (
    SfcStation,
    rear_axle_station,
    recipe,
    run_job,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> SfcStation:
    return SfcStation(mqtt_url, redis_url, unique)


async def test_a_job_started_after_the_store_lost_its_data_completes(station: SfcStation) -> None:
    station.equipment.behaviours = rear_axle_station(station.equipment)
    async with running(station.gateway()), station.mes() as mes:
        for job in ("J1", "J2"):
            await run_job(mes, recipe("rear_axle.json"), job)
            assert state_of(await final_response(mes, job))[:2] == ["Ended", "Completed"]
            # What Redis restarted without persistence shows: every key gone, the work
            # stream's consumer group with them (the engine still knows the scope).
            async with redis_client(station.redis_url) as redis:
                keys = [key async for key in redis.scan_iter(match=f"{station.name}:*")]
                assert keys
                for key in keys:  # one by one: on a Cluster they lie in different slots
                    await redis.delete(key)
