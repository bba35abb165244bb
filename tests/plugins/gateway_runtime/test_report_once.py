"""An execution's end is reported, counted and logged once, whatever looks at it meanwhile.

Two reports of one end can overlap: the reconciler's (it saw the end unreported on two passes)
and the ordinary one, slow under load or claimed from an instance thought dead. Job management
refuses the second Complete; the runtime must not log "recipe completed" twice nor count two
ended charts. Nor may the reconciler take an end committed while it looks at the job for a
Stop the execution missed. Real Redis and mosquitto; the overlaps are made by holding job
management's answers.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from gateway.equipment import EquipmentReply
from gateway.formats import Execution, Status
from gateway.jobstates import JobState
from gateway.testing import poll_until, running, wait_until
from gateway.testing.equipment import HeldCommands, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


async def test_an_end_reported_twice_at_once_is_logged_and_counted_once(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = station_with(
        TestEquipment(), mqtt_url, redis_url, unique, GATEWAY_RUNTIME_RECONCILE_SECONDS="3600"
    )
    steps, control = gateway.state.get(Coordinator).steps, gateway.job_control
    report, complete = steps.report, control.complete
    both_reporting = anyio.Event()
    completes = 0
    reported: list[str] = []  # reports of the job that are over

    async def counted_report(scope: str, job: str, execution: Execution | None = None) -> None:
        await report(scope, job, execution)
        reported.append(job)

    async def complete_as_another_report_does(*args: Any, **kwargs: Any) -> bool:
        nonlocal completes
        completes += 1
        if completes == 1:  # the ordinary report: a second one starts before it goes on
            reporters.start_soon(counted_report, SCOPE, "J1")
            await both_reporting.wait()
        elif completes == 2:
            both_reporting.set()
        return await complete(*args, **kwargs)

    steps.report = counted_report  # type: ignore[method-assign]
    control.complete = complete_as_another_report_does  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="gateway_runtime.steps"):
        async with (
            running(gateway),
            connect_test_client(mqtt_url) as client,
            anyio.create_task_group() as reporters,
        ):
            mes = JobsMes(client, unique, SCOPE)
            wm = work_master("WM1", linear_recipe(1), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == 1
            order = job_order("J1", work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
            assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
            await wait_until(lambda: len(reported) == 2)
    ends = [r.getMessage() for r in caplog.records if "recipe completed" in r.getMessage()]
    assert ends == [f"job {SCOPE}/J1: recipe completed"]
    labels = {"outcome": "completed"}
    ended = gateway.metrics.registry.get_sample_value("gateway_recipe_charts_ended_total", labels)
    assert ended == 1


async def test_the_reconciler_takes_an_end_committed_while_it_looks_for_no_missed_stop(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reconciliation pass reads a job's execution (running), then its state: meanwhile
    the execution ended and reported it, so the job is Ended.Completed. That is no Stop the
    execution missed: nothing is applied, and the end is logged once."""
    pending = HeldCommands()

    gateway = station_with(
        TestEquipment(behaviours={"bench": pending}),
        mqtt_url,
        redis_url,
        unique,
        GATEWAY_RUNTIME_RECONCILE_SECONDS="3600",
    )
    coordinator = gateway.state.get(Coordinator)
    control = gateway.job_control
    state = control.state
    ending = False

    async def state_once_the_job_ended(scope: str, job_order_id: str) -> JobState | None:
        if ending:  # the reconciler has read the running execution: the recipe ends now
            command = pending[0]
            reply = EquipmentReply(command.correlation_id, data={"ok": True}, scope=scope)
            await gateway.equipment.reply(reply)
            await poll_until(lambda: _ended(coordinator, scope, job_order_id))
        return await state(scope, job_order_id)

    control.state = state_once_the_job_ended  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="gateway_runtime"):
        async with running(gateway), connect_test_client(mqtt_url) as client:
            mes = JobsMes(client, unique, SCOPE)
            wm = work_master("WM1", linear_recipe(1), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == 1
            order = job_order("J1", work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
            await wait_until(lambda: pending)
            ending = True
            await coordinator.reconciler.reconcile()
            ending = False
            assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if "missed" in line]
    assert [line for line in said if "recipe completed" in line] == [
        f"job {SCOPE}/J1: recipe completed"
    ]


async def _ended(coordinator: Coordinator, scope: str, job: str) -> bool:
    execution = await coordinator.executions.read(scope, job)
    return execution is not None and execution.status is Status.ENDED


async def test_a_late_second_start_takes_the_end_committed_meanwhile_for_no_missed_stop(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A start handled twice (the dispatcher's and the reconciler's, say), the second while
    the job runs: it looks at the job's state before creating the execution (Running), and
    again after to apply what the MES sent meanwhile; by then the recipe has completed. That
    is no Stop: nothing is applied, and the end is reported once."""
    pending = HeldCommands()

    gateway = station_with(
        TestEquipment(behaviours={"bench": pending}),
        mqtt_url,
        redis_url,
        unique,
        GATEWAY_RUNTIME_RECONCILE_SECONDS="3600",
    )
    coordinator = gateway.state.get(Coordinator)
    control = gateway.job_control
    summary = control.summary
    looks = 0  # the second start's looks at the job's summary (its first look is the state)

    async def summary_once_the_job_ended(scope: str, job_order_id: str) -> Any:
        nonlocal looks
        if looks:
            looks += 1
            if looks == 2:  # its look after the create: the recipe ends just before
                command = pending[0]
                reply = EquipmentReply(command.correlation_id, data={"ok": True}, scope=scope)
                await gateway.equipment.reply(reply)
                await poll_until(lambda: _ended(coordinator, scope, job_order_id))
        return await summary(scope, job_order_id)

    control.summary = summary_once_the_job_ended  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="gateway_runtime"):
        async with running(gateway), connect_test_client(mqtt_url) as client:
            mes = JobsMes(client, unique, SCOPE)
            wm = work_master("WM1", linear_recipe(1), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == 1
            order = job_order("J1", work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
            await wait_until(lambda: pending)
            looks = 1
            await coordinator.steps.start(SCOPE, "J1")
            assert looks == 2
            assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if "came as it started" in line]
    assert [line for line in said if "recipe completed" in line] == [
        f"job {SCOPE}/J1: recipe completed"
    ]
