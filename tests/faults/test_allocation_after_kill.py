"""An instance killed (SIGKILL) while the job it runs holds the station's equipment.

Capacity 1 and equipment allocation on (the defaults). J1 runs the rear-axle recipe on the
instance that started its chart; the simulator is stopped first, so J1 stays Running, holding
positioner, tightener and camera, while J2 waits in the queue. That instance is killed with no
chance to clean up; the simulator comes back, and so does the killed instance, later, as under a
supervisor. The surviving (or the restarted) instance takes over J1's chart (its
work entries and timers are claimed after ``CLAIM_IDLE_SECONDS``), J1 ends, its allocation is
released with that state change, and J2 runs: nothing leaked, and J2 never ran beside J1.
"""

from __future__ import annotations

import anyio
import pytest

from gateway.testing import wait_until
from gateway_jobs.testing import response_data, state_texts

from .conftest import (
    SCOPE,
    FaultStation,
    configure_rear_axle,
    job_response,
    poll_until,
    rear_axle,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.mark.parametrize("recipe_format", ["sfc", "sequence"])
async def test_a_killed_instance_does_not_leak_its_allocation(
    fault_station: FaultStation, recipe_format: str
) -> None:
    station = fault_station
    station.environ.update(
        {"GATEWAY_JOBS_MAX_RUNNING_JOB_ORDERS": "1", "GATEWAY_JOBS_EQUIPMENT_ALLOCATION": "true"}
    )
    await station.start()
    simulator = station.simulator
    assert simulator is not None
    simulator.stop()  # J1's first command stays unanswered: it keeps running
    admitted = f"{station.name}:{{{SCOPE}}}:queue:admitted"
    async with station.mes() as mes, station.store() as client:
        await configure_rear_axle(mes, rear_axle(20, recipe_format))
        await store_jobs(mes, ["J1"])

        async def j1_running() -> bool:
            return state_texts(await job_response(mes, "J1"))[:1] == ["Running"]

        await poll_until(j1_running, timeout=30)
        await store_jobs(mes, ["J2"])
        queued = await job_response(mes, "J2")
        assert state_texts(queued)[:1] == ["AllowedToStart"]
        assert response_data(queued)["QueuePosition"] == 1
        assert await client.hkeys(admitted) == ["J1"]

        def runs_j1(instance: str) -> bool:
            log = station.gateways[instance].log.read_text(errors="replace")
            return f"job {SCOPE}/J1: recipe started" in log

        await wait_until(lambda: runs_j1("a") or runs_j1("b"), timeout=10)
        victim = "a" if runs_j1("a") else "b"
        station.gateways[victim].kill()
        simulator.start()
        await wait_until(lambda: simulator.ready() or simulator.returncode is not None, timeout=60)
        # A supervisor restarts the killed instance under its id. Until then the broker keeps
        # handing it its share of the reply topic (a shared subscription's offline member): a
        # reply to J2's first command may wait in its session, which it handles on restart.
        station.gateways[victim].start()

        ended = await wait_for_all_ended(mes, ["J1", "J2"], timeout=60)
        # Both ran to the end, and J2 started only once J1 had ended: the allocation moved
        # with J1's end, it was never shared and never leaked.
        assert {job: state_texts(response) for job, response in ended.items()} == {
            "J1": ["Ended", "Completed"],
            "J2": ["Ended", "Completed"],
        }, ended
        assert ended["J2"]["StartTime"] >= ended["J1"]["EndTime"]
        with anyio.fail_after(5):
            while await client.hlen(admitted):  # noqa: ASYNC110
                await anyio.sleep(0.05)
