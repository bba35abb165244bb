"""One of two instances frozen (SIGSTOP) under load, then resumed (SIGCONT).

The issue's scenario freezes an instance for 60 s against production timeouts (actions 15-60 s,
work claimed after 30 s). Here every relevant timeout is short and the freeze is longer than
all of them, so the same mechanisms run in seconds: actions time out after ``ACTION_TIMEOUT``
(3 s), a silent instance's work entries are claimed by the other after 2 s
(``CLAIM_IDLE_SECONDS``), and the freeze lasts ``FREEZE_SECONDS`` (8 s).

While frozen, the instance keeps its broker and Redis connections but does nothing: what the
broker hands its session (equipment replies, MES calls) waits. The other instance takes over its
work entries and fires the timers, so a job whose reply sat in the frozen session times out and
ends Aborted with that reason. After SIGCONT the frozen instance keeps running, answers the MES
calls it held within 15 s, finds the late replies belong to actions that already ended (ignored),
and no job ends twice.
"""

from __future__ import annotations

import time

import anyio
import pytest

from gateway_jobs.testing import response_data, state_texts

from .conftest import (
    CLAIM_IDLE_SECONDS,
    SCOPE,
    FaultStation,
    configure_rear_axle,
    endings,
    job_response,
    poll_until,
    rear_axle,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

JOBS = [f"J{number}" for number in range(30)]
ACTION_TIMEOUT = 3.0
FREEZE_SECONDS = 8.0
ANSWER_WITHIN = 15.0


@pytest.mark.parametrize("recipe_format", ["sfc", "sequence"])
async def test_a_frozen_instance_resumes_cleanly(
    fault_station: FaultStation, recipe_format: str
) -> None:
    assert max(ACTION_TIMEOUT, CLAIM_IDLE_SECONDS) < FREEZE_SECONDS
    station = fault_station
    await station.start()
    frozen = station.gateways["a"]
    active = f"{station.name}:{{{SCOPE}}}:rt:active"
    answered: dict[str, float] = {}
    async with station.mes() as mes:
        await configure_rear_axle(mes, rear_axle(ACTION_TIMEOUT, recipe_format))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(store_jobs, mes, JOBS)
            async with station.store() as client:

                async def running() -> bool:
                    return bool(await client.scard(active) >= 10)

                await poll_until(running, timeout=60)

            frozen.freeze()
            frozen_at = time.monotonic()

            async def call_during_freeze(job: str) -> None:
                # Half of these land in the frozen instance's session (shared subscription).
                await job_response(mes, job, timeout=FREEZE_SECONDS + ANSWER_WITHIN + 5)
                answered[job] = time.monotonic()

            async with anyio.create_task_group() as calls:
                for job in JOBS[:20]:
                    calls.start_soon(call_during_freeze, job)
                await anyio.sleep(max(0.0, FREEZE_SECONDS - (time.monotonic() - frozen_at)))
                assert frozen.returncode is None
                frozen.thaw()
                thawed_at = time.monotonic()
        responses = await wait_for_all_ended(mes, JOBS)

    assert all(code is None for code in station.running().values()), station.running()
    late = {job: round(at - thawed_at, 1) for job, at in answered.items() if at > thawed_at}
    assert len(answered) == 20
    assert all(delay <= ANSWER_WITHIN for delay in late.values()), late
    ended = await endings(station)
    assert ended == dict.fromkeys(JOBS, 1), ended  # no job ends twice
    aborted = {}
    for job, response in responses.items():
        states = state_texts(response)
        if states[0] == "Aborted":
            aborted[job] = str(response_data(response).get("Error"))
        else:
            assert states[:2] == ["Ended", "Completed"], (job, response)
    # The jobs whose answers sat in the frozen session timed out, and say so.
    assert aborted, "no action timed out during the freeze: the test did not freeze any work"
    for job, error in aborted.items():
        assert f"within {ACTION_TIMEOUT:g} s" in error, (job, error)
    print(f"frozen {FREEZE_SECONDS} s: {len(aborted)} aborted (timeout), late answers {late}")
