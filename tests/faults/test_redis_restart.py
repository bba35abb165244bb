"""Redis killed (SIGKILL) under load and back 3 s later with its AOF: nothing is lost.

Two gateway instances and the simulated station run 50 rear-axle jobs; Redis is killed while
they run and while the MES is still storing jobs. No gateway exits, both report not ready
(``/readyz`` 503, the HTTP endpoint answering all along) during the outage and ready after it,
every job ends Completed exactly once, and a job started afterwards completes too.
"""

from __future__ import annotations

import time

import anyio
import pytest

from gateway_jobs.testing import state_texts

from .conftest import (
    SCOPE,
    FaultStation,
    configure_rear_axle,
    endings,
    poll_until,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

JOBS = [f"J{number}" for number in range(50)]
OUTAGE_SECONDS = 3.0


async def test_redis_killed_and_back_after_3_s_loses_no_job(fault_station: FaultStation) -> None:
    station = fault_station
    await station.start()
    active = f"{station.name}:{{{SCOPE}}}:sfc:active"
    async with station.mes() as mes:
        await configure_rear_axle(mes)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(store_jobs, mes, JOBS)
            async with station.store() as client:

                async def running() -> bool:
                    return bool(await client.scard(active) >= 5)

                await poll_until(running, timeout=60)  # jobs are running

            station.redis.kill()
            killed = time.monotonic()
            # The HTTP endpoints stay up and say why they are not ready.
            for instance in station.gateways:
                with anyio.fail_after(20):
                    while (answer := await station.readyz(instance))[0] != 503:
                        assert answer[0] != 0, f"{instance}: /readyz did not answer"
                        await anyio.sleep(0.05)
                body = answer[1]
                assert body["checks"]["store"] is False, body
            await anyio.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - killed)))
            assert all(code is None for code in station.running().values()), station.running()
            station.redis.start()  # same port, same directory: the AOF is loaded again
            await station.wait_ready()
        responses = await wait_for_all_ended(mes, JOBS)

        await store_jobs(mes, ["after"])
        after = await wait_for_all_ended(mes, ["after"])

    assert all(code is None for code in station.running().values()), station.running()
    for job, response in {**responses, **after}.items():
        assert state_texts(response)[:2] == ["Ended", "Completed"], (job, response)
    ended = await endings(station)
    assert ended == dict.fromkeys([*JOBS, "after"], 1), ended
    for process in station.gateways.values():
        log = process.log.read_text(errors="replace")
        assert " back after " in log  # each outage is logged once, and its end once
