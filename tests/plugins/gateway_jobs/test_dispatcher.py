"""The dispatcher in a running gateway: the MES over the real mosquitto, state in the real Redis.

Jobs run the ``ScriptedInterpreter``'s default recipe: Running until the MES stops them, so the
test decides when a slot frees up and reads the order jobs started in from the interpreter.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
import pytest

from gateway.cloudevents import format_time
from gateway.testing import running
from gateway.testing.equipment import TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    ScriptedInterpreter,
    Station,
    job_order,
    response_data,
    return_status,
    state_texts,
    work_master,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def until(condition: Callable[[], Awaitable[bool]], timeout: float = 10) -> None:
    """Poll another component's state with a deadline (no event to wait on over MQTT)."""
    with anyio.fail_after(timeout):
        while not await condition():  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def state(mes: JobsMes, job: str) -> list[str]:
    return state_texts((await mes.job_response(job)).data["JobResponse"])


async def running_jobs(mes: JobsMes, jobs: list[str]) -> set[str]:
    return {job for job in jobs if (await state(mes, job))[:1] == ["Running"]}


async def ok(reply: Awaitable[object]) -> None:
    result = await reply
    assert return_status(result) == ReturnStatus.NO_ERROR, result  # type: ignore[arg-type]


async def prepare(mes: JobsMes, *equipment: str) -> None:
    await ok(mes.configure("workmaster", work_master("wm")))
    if equipment:
        await ok(mes.configure("equipment", [{"ID": name} for name in equipment]))


def interpreter(station: Station) -> ScriptedInterpreter:
    (only,) = station.plugin.interpreters
    return only


async def test_capacity_one_runs_priorities_5_3_1_one_at_a_time(station: Station) -> None:
    jobs = ["p1", "p5", "p3"]
    async with running(station.gateway()), station.mes() as mes:
        await prepare(mes)
        await ok(mes.store(job_order("busy"), "StoreAndStart"))
        await until(lambda: _is(mes, "busy", "Running"))
        async with anyio.create_task_group() as tasks:  # started together, while busy runs
            for job, priority in zip(jobs, (1, 5, 3), strict=True):
                tasks.start_soon(ok, mes.store(job_order(job, priority=priority), "StoreAndStart"))
        positions = {
            job: response_data((await mes.job_response(job)).data["JobResponse"]).get(
                "QueuePosition"
            )
            for job in jobs
        }
        assert positions == {"p5": 1, "p3": 2, "p1": 3}
        order = []
        await ok(mes.act("Stop", "busy"))
        for _ in jobs:
            await until(lambda: _one_running(mes, jobs))
            (now,) = await running_jobs(mes, jobs)
            order.append(now)
            await ok(mes.act("Stop", now))
        assert order == ["p5", "p3", "p1"]
        assert interpreter(station).started == ["busy", "p5", "p3", "p1"]


async def _is(mes: JobsMes, job: str, top: str) -> bool:
    return (await state(mes, job))[:1] == [top]


async def _one_running(mes: JobsMes, jobs: list[str]) -> bool:
    now = await running_jobs(mes, jobs)
    assert len(now) <= 1, now  # never two at once
    return len(now) == 1


async def test_a_start_time_in_the_future_holds_the_job_until_then(station: Station) -> None:
    async with running(station.gateway(dispatch_poll_seconds="30")), station.mes() as mes:
        await prepare(mes)
        start = time.time() + 1.5
        order = job_order("later", StartTime=format_time_of(start))
        await ok(mes.store(order, "StoreAndStart"))
        assert await state(mes, "later") == ["AllowedToStart", "Ready"]
        # Polled until it runs; it must not run before its StartTime (the poll is 30 s: the
        # StartTime itself wakes the dispatcher).
        with anyio.fail_after(10):
            while not await _is(mes, "later", "Running"):
                assert time.time() < start + 5
                await anyio.sleep(0.02)
        started = (await mes.job_response("later")).data["JobResponse"]["StartTime"]
        assert started >= format_time_of(start)


def format_time_of(seconds: float) -> str:
    return format_time(datetime.fromtimestamp(seconds, UTC))


async def test_equipment_conflict_serialises_while_a_disjoint_job_runs(
    station: Station,
) -> None:
    async with running(station.gateway(max_running_job_orders="2")), station.mes() as mes:
        await prepare(mes, "positioner", "camera")
        for job, needs in (("a1", "positioner"), ("a2", "positioner"), ("c1", "camera")):
            order = job_order(job, EquipmentRequirements=[{"ID": needs}])
            await ok(mes.store(order, "StoreAndStart"))
        all_jobs = ["a1", "a2", "c1"]
        await until(lambda: _running_are(mes, all_jobs, {"a1", "c1"}))
        assert await state(mes, "a2") == ["AllowedToStart", "Ready"]
        await ok(mes.act("Stop", "a1"))
        await until(lambda: _running_are(mes, all_jobs, {"a2", "c1"}))


async def _running_are(mes: JobsMes, jobs: list[str], expected: set[str]) -> bool:
    return await running_jobs(mes, jobs) == expected


async def test_offline_stops_new_starts_and_online_resumes(station: Station) -> None:
    gateway = station.gateway(max_running_job_orders="0")
    async with running(gateway), station.mes() as mes:
        await prepare(mes)
        await ok(mes.store(job_order("first"), "StoreAndStart"))
        await until(lambda: _is(mes, "first", "Running"))
        await ok(mes.configure("online", {"Online": False, "Reason": "maintenance"}))
        await ok(mes.store(job_order("second"), "StoreAndStart"))
        await ok(mes.act("Stop", "first"))  # a running job finishes while offline
        await until(lambda: _is(mes, "first", "Ended"))
        assert await state(mes, "second") == ["AllowedToStart", "Ready"]
        assert interpreter(station).started == ["first"]
        metrics = (await gateway.metrics.render()).decode()
        for line in (
            'gateway_scope_online{scope="cell1"} 0.0',
            'gateway_job_queue_waiting{scope="cell1"} 1.0',
            'gateway_job_queue_admitted{scope="cell1"} 0.0',
            'gateway_job_queue_capacity{scope="cell1"} 0.0',
            'gateway_job_queue_position{job="second",scope="cell1"} 1.0',
        ):
            assert line in metrics, line
        await ok(mes.configure("online", {"Online": True}))
        await until(lambda: _is(mes, "second", "Running"))


async def test_actions_routed_by_type_hold_the_equipment_declaring_it(station: Station) -> None:
    press = "com.example.press.v1"
    pressing = {"run": True, "uses": [{"action": "press_it", "type_id": press}]}
    gauging = {"run": True, "uses": [{"action": "gauge", "type_id": "g", "equipment": "gauge-1"}]}
    station.equipment = TestEquipment()  # serves every command: the recipes are routable
    async with running(station.gateway(max_running_job_orders="2")), station.mes() as mes:
        declared = {"ID": "press-1", "Properties": [{"ID": "TypeIds", "Value": [press]}]}
        await ok(mes.configure("equipment", declared))
        await ok(mes.configure("workmaster", work_master("wm-press", pressing)))
        await ok(mes.configure("workmaster", work_master("wm-gauge", gauging)))
        for job, wm in (("p1", "wm-press"), ("p2", "wm-press"), ("g1", "wm-gauge")):
            await ok(mes.store(job_order(job, work_masters=[wm]), "StoreAndStart"))
        await until(lambda: _running_are(mes, ["p1", "p2", "g1"], {"p1", "g1"}))
        queue = await mes.queue(until=lambda document: document["RunningCount"] == 2)
    assert queue["Running"] == [
        {"JobOrderID": "g1", "Equipment": ["gauge-1"]},
        {"JobOrderID": "p1", "Equipment": ["press-1"]},
    ]
    assert [(row["JobOrderID"], row["Position"]) for row in queue["Waiting"]] == [("p2", 1)]


async def test_an_update_may_not_move_a_job_let_start_to_other_equipment(
    station: Station,
) -> None:
    """A job let start holds the equipment its turn was given with (its recipe has not begun:
    this interpreter waits). An Update that would make it use other equipment is refused:
    another job may be let start on that equipment, and both would command it. One that keeps
    the equipment is done."""
    on = {
        name: {"uses": [{"action": "work", "type_id": "t", "equipment": name}]}
        for name in ("press-a", "press-b")
    }
    station.equipment = TestEquipment()  # serves every command: the recipes are routable
    async with running(station.gateway(max_running_job_orders="2")), station.mes() as mes:
        await prepare(mes, "press-a", "press-b")
        for name, recipe in on.items():
            await ok(mes.configure("workmaster", work_master(name, recipe)))
        await ok(mes.store(job_order("J1", work_masters=["press-a"]), "StoreAndStart"))
        await until(lambda: _started(station, ["J1"]))  # let start, holding press-a
        moved = await mes.call("Update", {"JobOrder": job_order("J1", work_masters=["press-b"])})
        assert return_status(moved) == ReturnStatus.INVALID_JOB_ORDER_STATUS
        assert "J1' was let start holding press-a" in (moved.errormessage or "")
        kept = job_order("J1", work_masters=["press-a"], priority=3)
        await ok(mes.call("Update", {"JobOrder": kept}))
        response = (await mes.job_response("J1")).data["JobResponse"]
    assert state_texts(response) == ["AllowedToStart", "Ready"]


async def _started(station: Station, jobs: list[str]) -> bool:
    return interpreter(station).started == jobs
