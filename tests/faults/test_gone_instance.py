"""An instance killed (SIGKILL) under load that does not come back.

The broker keeps handing the dead instance's sessions their share of the shared subscriptions
(equipment replies, MES calls) until someone connects under its client ids. The surviving
instance notices the dead one's stale entry in the instance table, takes its sessions over and
handles what they held: every job ends Completed exactly once although about half of the
replies after the kill went to the dead instance's session, and the survivor says in its log
that it adopted them.
"""

from __future__ import annotations

import pytest

from gateway.instances import ALIVE_WITHIN_SECONDS
from gateway.testing import wait_until
from gateway_jobs.testing import state_texts
from gateway_mqtt.adoption import ADOPT_EVERY_SECONDS

from .conftest import (
    SCOPE,
    FaultStation,
    configure_rear_axle,
    endings,
    poll_until,
    rear_axle,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

JOBS = [f"J{number}" for number in range(20)]
# Longer than it takes to find the dead instance and adopt its sessions, so a reply that
# waited in its session still arrives in time.
ACTION_TIMEOUT_SECONDS = ALIVE_WITHIN_SECONDS + 2 * ADOPT_EVERY_SECONDS + 15


async def test_a_killed_instance_that_stays_dead_loses_no_job(
    fault_station: FaultStation,
) -> None:
    station = fault_station
    await station.start()
    active = f"{station.name}:{{{SCOPE}}}:rt:active"
    async with station.mes() as mes, station.store() as client:
        await configure_rear_axle(mes, rear_axle(timeout_seconds=ACTION_TIMEOUT_SECONDS))
        await store_jobs(mes, JOBS[:10])

        async def running() -> bool:
            return bool(await client.scard(active) >= 5)

        await poll_until(running, timeout=60)
        station.gateways["a"].kill()  # and it stays dead
        await store_jobs(mes, JOBS[10:])
        responses = await wait_for_all_ended(mes, JOBS, timeout=ACTION_TIMEOUT_SECONDS + 60)

    for job, response in responses.items():
        assert state_texts(response)[:2] == ["Ended", "Completed"], (job, response)
    assert await endings(station) == dict.fromkeys(JOBS, 1)

    def adopted() -> bool:
        survivor = station.gateways["b"].log.read_text(errors="replace")
        return f"instance {station.name}-a stopped without leaving" in survivor

    await wait_until(adopted, timeout=ALIVE_WITHIN_SECONDS + 3 * ADOPT_EVERY_SECONDS)
