"""What a job's start and end cost the runtime in Redis, and a start lost to a crash.

A job starts where the dispatcher admits it, with no work entry written and read back: its
start is one commit script on the runtime's keys (its create, which also checks the earlier run
and the breakpoints and unparks the job), and its end one more (its close, which also forgets
the job's breakpoints, parking and kept events). A crash between the job's Run and its create
leaves a job let start with no execution: reconciliation starts it.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from gateway.equipment import EquipmentCommand, EquipmentReply
from gateway.recipes import RecipeJob
from gateway.testing import poll_until, running
from gateway.testing.equipment import HeldCommands, NoAnswer, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_runtime.scripts import COMMIT
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
STEPS = 3


async def monitored(redis_url: str, prefix: str, seen: list[str], ready: anyio.Event) -> None:
    """Every command a client sends on the keys under ``prefix``, until cancelled."""
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        async with client.monitor() as monitor:
            ready.set()
            async for line in monitor.listen():
                if line.get("client_type") != "lua" and prefix in line["command"]:
                    seen.append(line["command"])
    finally:
        await client.aclose()


async def test_a_start_and_an_end_are_one_commit_script_each_on_the_runtimes_keys(
    mqtt_url: str, redis_single_url: str, unique: str
) -> None:
    redis_url = redis_single_url  # MONITOR: one node sees every command
    pending = HeldCommands()

    gateway = station_with(
        TestEquipment(behaviours={"bench": pending}),
        mqtt_url,
        redis_url,
        unique,
        GATEWAY_RUNTIME_RECONCILE_SECONDS="3600",
    )
    coordinator = gateway.state.get(Coordinator)
    executions = coordinator.executions
    seen: list[str] = []
    ready = anyio.Event()
    async with running(gateway), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, SCOPE)
        wm = work_master("WM1", linear_recipe(STEPS, type_id="bench"), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == 1
        await coordinator.context.client.script_load(COMMIT)  # no NOSCRIPT retry counted
        async with anyio.create_task_group() as watching:
            watching.start_soon(monitored, redis_url, f"{unique}:", seen, ready)
            await ready.wait()
            order = job_order("J1", work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
            for step in range(STEPS):
                # Answered once the step's commit is done with (a reply overtaking it reads
                # the state: the step path's affair, not the start's or the end's).
                await poll_until(
                    lambda step=step: _is(executions.remembered(SCOPE, "J1"), step)  # type: ignore[misc]
                )
                await poll_until(lambda step=step: _is(len(pending), step + 1))  # type: ignore[misc]
                command = pending[step]
                reply = EquipmentReply(command.correlation_id, data={"ok": True}, scope=SCOPE)
                await gateway.equipment.reply(reply)
            assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]

            async def closed() -> bool:  # the create and the close name 13 keys
                scripts = [c.split(" ", 3) for c in seen if c.startswith("EVALSHA")]
                return [parts[2] for parts in scripts].count("13") == 2

            await poll_until(closed)
            watching.cancel_scope.cancel()
    of_the_job = [
        command
        for command in seen
        if ":rt:" in command
        and ("J1" in command or "parked-jobs" in command)
        and not command.startswith("ZREM")  # commands sent, confirmed: the step path's
    ]
    # The create, one commit per step, the close: nothing else names the job on the
    # runtime's keys (no read of its state, no work entry, no bookkeeping of its own).
    assert [command.split(" ", 1)[0] for command in of_the_job] == ["EVALSHA"] * (STEPS + 2), (
        of_the_job
    )
    others = [command for command in seen if not command.startswith("EVALSHA")]
    assert not [command for command in others if "rt:unclaimed" in command]  # kept events
    assert not [c for c in others if c.startswith("XADD") and "rt:work" in c]  # work entries


async def _is(value: object, expected: object) -> bool:
    return value == expected


async def test_a_start_lost_between_the_run_and_the_create_is_made_by_reconciliation(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = station_with(
        TestEquipment(), mqtt_url, redis_url, unique, GATEWAY_RUNTIME_RECONCILE_SECONDS="0.2"
    )
    coordinator = gateway.state.get(Coordinator)
    create, start = coordinator.executions.create, coordinator.work.start
    lost: list[str] = []

    async def crashing_create(*args: Any, **kwargs: Any) -> Any:
        if not lost:  # the instance dies here, its job Running: nothing more of this start
            lost.append("create")
            raise RuntimeError("the instance died")
        return await create(*args, **kwargs)

    async def lost_hand_over(scope: str, job: str) -> None:
        if lost == ["create"]:  # the start's hand-over to the work stream died with it
            lost.append("hand-over")
            return
        await start(scope, job)

    coordinator.executions.create = crashing_create  # type: ignore[method-assign]
    coordinator.work.start = lost_hand_over  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="gateway_runtime"):
        async with running(gateway), connect_test_client(mqtt_url) as client:
            mes = JobsMes(client, unique, SCOPE)
            wm = work_master("WM1", linear_recipe(2), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == 1
            order = job_order("J1", work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
            assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
    assert lost == ["create", "hand-over"]
    said = [record.getMessage() for record in caplog.records]
    assert f"job {SCOPE}/J1 runs with no execution (its start was lost): starting it" in said


async def test_a_start_with_no_runtime_running_here_goes_to_the_work_stream(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    """An instance whose runtime does not run (another role) hands the start to one that does."""
    gateway = station_with(TestEquipment(), mqtt_url, redis_url, unique)
    coordinator = gateway.state.get(Coordinator)
    handed: list[tuple[str, str]] = []

    async def hand_over(scope: str, job: str) -> None:
        handed.append((scope, job))

    coordinator.work.start = hand_over  # type: ignore[method-assign]
    job = RecipeJob(SCOPE, "J1", {}, {}, "2026-11-29T00:00:00Z")
    await coordinator.start_job(job)
    assert handed == [(SCOPE, "J1")]


async def test_a_timer_a_commit_sets_fires_on_time_though_idle_looks_are_rare(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    """The timers are looked at when one this instance set is due, not every poll interval:
    with the idle look a minute away, an action's 0.3 s timeout still ends the job in time."""

    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    gateway = station_with(
        TestEquipment(behaviours={"bench": silent}),
        mqtt_url,
        redis_url,
        unique,
        GATEWAY_RUNTIME_SCOPE_POLL_SECONDS="60",
    )
    async with running(gateway), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, SCOPE)
        recipe = linear_recipe(1, timeout_seconds=0.3)
        wm = work_master("WM1", recipe, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == 1
        order = job_order("J1", work_masters=["WM1"])
        assert return_status(await mes.store(order, method="StoreAndStart")) == 1
        with anyio.fail_after(5):
            response = await final_response(mes, "J1")
    assert state_of(response)[0] == "Aborted"


async def test_a_burst_of_admissions_starts_as_many_jobs_at_once_as_work_entries(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    gateway = station_with(
        TestEquipment(),
        mqtt_url,
        redis_url,
        unique,
        GATEWAY_RUNTIME_MAX_CONCURRENT_ITEMS="2",
        GATEWAY_JOBS_MAX_RUNNING_JOB_ORDERS="0",  # all four admitted at once
        GATEWAY_JOBS_EQUIPMENT_ALLOCATION="false",
    )
    coordinator = gateway.state.get(Coordinator)
    start = coordinator.steps.start
    release = anyio.Event()
    starting: list[str] = []
    now = peak = 0

    async def held_start(scope: str, job: str) -> None:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        starting.append(job)
        await release.wait()
        now -= 1
        await start(scope, job)

    handed: list[str] = []
    start_job = coordinator.start_job

    async def counted_start_job(job: RecipeJob) -> None:
        await start_job(job)
        handed.append(job.job_order_id)

    coordinator.steps.start = held_start  # type: ignore[method-assign]
    coordinator.start_job = counted_start_job  # type: ignore[method-assign]
    async with running(gateway), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, SCOPE)
        wm = work_master("WM1", linear_recipe(1), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == 1
        jobs = [f"J{number}" for number in range(4)]
        for job in jobs:
            order = job_order(job, work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
        await poll_until(lambda: _is(len(handed), len(jobs)))  # all four handed over
        await anyio.wait_all_tasks_blocked()  # and as far as they go
        assert len(starting) == 2
        release.set()
        for job in jobs:
            assert state_of(await final_response(mes, job))[:2] == ["Ended", "Completed"]
    assert peak == 2
