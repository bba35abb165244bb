"""``JobControl``, the recipe interpreter's side: compare-and-swap calls and the Job Response."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import anyio
import pytest

from gateway.changes import Trigger
from gateway.logs import ContextFilter
from gateway.recipes import JobCommand, JobOutcome, ProcessValue, recipe_version
from gateway.store import Store
from gateway_jobs import stored as stored_jobs
from gateway_jobs.events import Cause
from gateway_jobs.model import (
    JobOrder,
    JobOrderCall,
    JobOrderIDCall,
    WorkMaster,
    from_json,
    to_json,
)
from gateway_jobs.testing import LocalJobs, change_records, local_jobs, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
CAUSE = Cause(correlationid=None, causationid="test")
RECIPE = {"run": False}
VERSION = {"ID": "RecipeVersion", "Value": recipe_version(RECIPE)}
CHOSEN = {"ID": "WorkMasterID", "Value": "wm"}  # the Work Master the job runs


async def prepared(jobs: LocalJobs, job: str = "j1", *, method: str = "StoreAndStart") -> None:
    """Work Master ``wm`` (parameters, a recipe the test drives) and a job in AllowedToStart."""
    wm = work_master("wm", RECIPE) | {"Parameters": [{"ID": "speed", "Value": 2}]}
    assert (await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", wm)).ok
    order = JobOrder(job, work_master_id=[WorkMaster("wm")])
    assert (await jobs.manager.store(SCOPE, method, JobOrderCall(order), CAUSE)).ok


async def response(jobs: LocalJobs, job: str = "j1") -> dict[str, object]:
    reply = await jobs.manager.job_response(SCOPE, job)
    assert reply.job_response is not None
    document: dict[str, object] = to_json(reply.job_response)
    return document


async def test_calls_return_false_and_change_nothing_when_the_state_does_not_match(
    jobs: LocalJobs,
) -> None:
    await prepared(jobs, method="Store")  # NotAllowedToStart: not handed over yet
    control = jobs.control
    assert await control.run(SCOPE, "j1") is False
    assert await control.complete(SCOPE, "j1", JobOutcome()) is False
    assert await control.hold(SCOPE, "j1", "why") is False
    assert await control.abort(SCOPE, "j1", JobOutcome(error="x")) is False
    assert await control.record_results(SCOPE, "j1", [ProcessValue("a", 1)]) is False
    assert await control.run(SCOPE, "unknown") is False
    assert await control.state(SCOPE, "j1") == "NotAllowedToStart.Ready"
    assert await control.state(SCOPE, "unknown") is None
    assert await control.job(SCOPE, "unknown") is None


async def test_job_gives_the_order_and_the_work_master_it_was_accepted_with(
    jobs: LocalJobs,
) -> None:
    await prepared(jobs)
    assert jobs.interpreter.started == ["j1"]
    await jobs.manager.config.apply(SCOPE, "workmaster", "DELETE", {"ID": "wm"})
    job = await jobs.control.job(SCOPE, "j1")
    assert job is not None
    assert job.job_order["JobOrderID"] == "j1"
    assert job.dataschema == work_master()["DataSchema"]
    assert job.recipe == {"run": False}
    assert job.parameters() == {"speed": 2}


async def test_run_then_complete_writes_the_results_as_job_response_data(jobs: LocalJobs) -> None:
    await prepared(jobs)
    control = jobs.control
    assert await control.run(SCOPE, "j1") is True
    assert await control.run(SCOPE, "j1") is False  # already running
    assert await control.record_results(SCOPE, "j1", [ProcessValue("count", 1)])
    results = [
        ProcessValue("torque", 41.5, unit="N.m", description="final torque"),
        ProcessValue("count", 2),
        ProcessValue("reading", math.nan),
    ]
    assert await control.complete(SCOPE, "j1", JobOutcome(results=results)) is True
    assert await control.state(SCOPE, "j1") == "Ended.Completed"
    document = await response(jobs)
    assert document["JobResponseData"] == [
        VERSION,  # recorded at Store: the recipe this job runs, of which Work Master
        CHOSEN,
        {"ID": "count", "Value": 2},  # the later value replaced the earlier one
        {
            "ID": "torque",
            "Value": 41.5,
            "Description": [{"Locale": "en", "Text": "final torque"}],
            "EngineeringUnits": {"DisplayName": {"Locale": "en", "Text": "N.m"}},
        },
        {"ID": "reading", "Value": "nan"},  # JSON has no NaN: kept as text
    ]
    assert document["StartTime"] is not None
    assert document["EndTime"] is not None
    _, event = jobs.events.events[-1]
    assert event.data["JobResponse"]["JobResponseData"] == document["JobResponseData"]


async def test_state_changes_carry_the_work_master_as_stored_without_checking_it_again(
    jobs: LocalJobs, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Work Master was checked at Store; converting it again on every load and write cost
    about 2.5 ms per state change with a 200-step recipe."""
    await prepared(jobs)
    key = jobs.manager.repository.job_key(SCOPE, "j1")
    stored = (await store.get_json(key))["WorkMaster"]
    converted: list[object] = []

    def counting(value: object, kind: object, **options: object) -> object:
        if kind is WorkMaster:
            converted.append(value)
        return from_json(value, kind, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(stored_jobs, "from_json", counting)
    control = jobs.control
    assert await control.job(SCOPE, "j1") is not None
    assert await control.run(SCOPE, "j1")
    assert await control.complete(SCOPE, "j1", JobOutcome()) is True
    assert converted == []
    assert (await store.get_json(key))["WorkMaster"] == stored
    summary = await control.summary(SCOPE, "j1")
    assert summary is not None
    assert summary.work_master_id == "wm"


async def test_abort_records_the_error_and_the_side_effects(jobs: LocalJobs) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    outcome = JobOutcome(
        results=[ProcessValue("step", "Tighten")], error="no reply", side_effects=True
    )
    assert await jobs.control.abort(SCOPE, "j1", outcome) is True
    document = await response(jobs)
    assert document["Description"] == {"Locale": "en", "Text": "Aborted: no reply"}
    assert document["JobResponseData"] == [
        VERSION,
        CHOSEN,
        {"ID": "step", "Value": "Tighten"},
        {"ID": "Error", "Value": "no reply"},
        {"ID": "SideEffects", "Value": True},
    ]
    assert await jobs.control.state(SCOPE, "j1") == "Aborted"


async def test_hold_then_the_mes_resumes_or_aborts(jobs: LocalJobs) -> None:
    await prepared(jobs)
    await prepared(jobs, "j2")
    for job in ("j1", "j2"):
        assert await jobs.control.run(SCOPE, job)
        assert await jobs.control.hold(SCOPE, job, "torque out of range") is True
    assert (await response(jobs))["Description"] == {
        "Locale": "en",
        "Text": "Held: torque out of range",
    }
    assert (await jobs.manager.act(SCOPE, "Resume", JobOrderIDCall("j1"), CAUSE)).ok
    assert (await jobs.manager.act(SCOPE, "Abort", JobOrderIDCall("j2"), CAUSE)).ok
    assert jobs.interpreter.commands == [("j1", JobCommand.RESUME), ("j2", JobCommand.ABORT)]
    assert await jobs.control.state(SCOPE, "j1") == "Running"
    assert await jobs.control.complete(SCOPE, "j1", JobOutcome())
    assert "Description" not in await response(jobs)  # the hold is over


async def test_results_after_the_mes_stopped_the_job_are_kept(jobs: LocalJobs) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    assert (await jobs.manager.act(SCOPE, "Stop", JobOrderIDCall("j1"), CAUSE)).ok
    assert await jobs.control.record_results(SCOPE, "j1", [ProcessValue("parts", 7)]) is True
    assert (await response(jobs))["JobResponseData"] == [
        VERSION,
        CHOSEN,
        {"ID": "parts", "Value": 7},
    ]
    assert (await jobs.manager.act(SCOPE, "Clear", JobOrderIDCall("j1"), CAUSE)).ok
    assert await jobs.control.record_results(SCOPE, "j1", [ProcessValue("parts", 8)]) is False


async def test_aborting_a_job_never_started_does_not_bother_the_interpreter(
    jobs: LocalJobs,
) -> None:
    await prepared(jobs, method="Store")
    assert (await jobs.manager.act(SCOPE, "Abort", JobOrderIDCall("j1"), CAUSE)).ok
    assert jobs.interpreter.started == []
    assert jobs.interpreter.commands == []


async def test_concurrent_runs_from_two_instances_have_one_winner(
    jobs: LocalJobs, store_factory: Callable[[], Store]
) -> None:
    await prepared(jobs)
    async with store_factory() as other_store:
        other = local_jobs(other_store)
        results: list[bool] = []

        async def run(control: LocalJobs) -> None:
            results.append(await control.control.run(SCOPE, "j1"))

        async with anyio.create_task_group() as tasks:
            for index in range(20):
                tasks.start_soon(run, jobs if index % 2 else other)
    assert sorted(results) == [False] * 19 + [True]
    records = await change_records(jobs.manager.repository.store, SCOPE)
    assert [record.trigger for record in records] == [Trigger.STORE_AND_START, Trigger.RUN]


async def test_change_records_carry_what_the_publisher_needs(jobs: LocalJobs, store: Store) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    assert await jobs.control.complete(SCOPE, "j1", JobOutcome())
    assert (await jobs.manager.act(SCOPE, "Clear", JobOrderIDCall("j1"), CAUSE)).ok
    records = await change_records(store, SCOPE)
    assert [(r.trigger, r.previous, r.state, r.has_result) for r in records] == [
        ("StoreAndStart", "InitialState", "AllowedToStart.Ready", False),
        ("Run", "AllowedToStart.Ready", "Running", False),
        ("Complete", "Running", "Ended.Completed", True),
        ("Clear", "Ended.Completed", "EndState", False),
    ]
    assert {r.job_order_id for r in records} == {"j1"}
    assert all(r.priority == 0 and r.scope == SCOPE and r.written_at for r in records)
    # What travels: the order with the new job, the final response with the end.
    assert [(r.job_order is not None, r.job_response is not None) for r in records] == [
        (True, False),
        (False, False),
        (False, True),
        (False, False),
    ]
    # Cleared: gone from documents and indexes, so it no longer counts.
    assert await jobs.manager.repository.count(SCOPE) == 0
    assert await store.client.get(store.keys.scoped(SCOPE, "job", "j1")) is None


async def test_jobs_lists_each_job_with_state_priority_times_and_recipe_version(
    jobs: LocalJobs,
) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    changed = work_master("wm", {"run": True})  # the Work Master changes; j1 keeps its recipe
    assert (await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", changed)).ok
    order = JobOrder("j2", priority=5, work_master_id=[WorkMaster("wm")])
    assert (await jobs.manager.store(SCOPE, "Store", JobOrderCall(order), CAUSE)).ok
    listed = await jobs.control.jobs(SCOPE)
    assert [(job.job_order_id, job.state, job.priority) for job in listed] == [
        ("j2", "NotAllowedToStart.Ready", 5),  # highest priority first
        ("j1", "Running", 0),
    ]
    j2, j1 = listed
    assert j1.recipe_version == recipe_version(RECIPE)
    assert j2.recipe_version == recipe_version({"run": True})
    assert j1.stored_at is not None
    assert j1.start_time is not None
    assert j2.start_time is None
    assert j1.work_master_id == "wm"
    assert await jobs.control.summary(SCOPE, "j1") == j1
    assert await jobs.control.summary(SCOPE, "nope") is None
    assert (await jobs.control.response(SCOPE, "j1") or {})["JobResponseData"] == [VERSION, CHOSEN]
    assert await jobs.control.response(SCOPE, "nope") is None


async def test_an_operator_request_is_the_mes_method_and_says_who_asked(jobs: LocalJobs) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    paused = await jobs.control.request(SCOPE, "j1", JobCommand.PAUSE, "operator alice")
    assert (paused.accepted, paused.status) == (True, "NO_ERROR")
    assert await jobs.control.state(SCOPE, "j1") == "Interrupted.Suspended"
    assert jobs.interpreter.commands == [("j1", JobCommand.PAUSE)]
    again = await jobs.control.request(SCOPE, "j1", JobCommand.PAUSE, "operator bob")
    assert (again.accepted, again.status) == (False, "INVALID_JOB_ORDER_STATUS")
    assert again.message is not None
    assert "Interrupted.Suspended" in again.message
    assert [(call["method"], call["status"], call["requested_by"]) for call in jobs.methods] == [
        ("Pause", "NO_ERROR", "operator alice"),
        ("Pause", "INVALID_JOB_ORDER_STATUS", "operator bob"),
    ]


async def test_why_a_job_failed_is_logged_at_warning_with_scope_job_and_correlation_id(
    jobs: LocalJobs, caplog: pytest.LogCaptureFixture
) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    caplog.handler.addFilter(ContextFilter())
    outcome = JobOutcome(error="action tighten failed: no reply", correlation_id="j1:tighten:2")
    with caplog.at_level(logging.WARNING, logger="gateway_jobs"):
        assert await jobs.control.abort(SCOPE, "j1", outcome)
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "action tighten failed: no reply" in record.getMessage()
    assert (record.scope, record.job, record.correlationid) == (SCOPE, "j1", "j1:tighten:2")  # type: ignore[attr-defined]


async def test_an_acknowledgement_is_a_method_call_of_the_failed_job_while_it_is_there(
    jobs: LocalJobs,
) -> None:
    await prepared(jobs)
    assert await jobs.control.run(SCOPE, "j1")
    await jobs.control.abort(SCOPE, "j1", JobOutcome(error="jammed", side_effects=True))
    await jobs.control.block(SCOPE, "j1", ["clamp"], "job j1 failed unsafe: jammed")
    await jobs.control.block(SCOPE, "gone", ["nutrunner"], "job gone failed unsafe: jammed")
    released = await jobs.control.acknowledge(SCOPE, None, "operator ana")
    assert sorted(item.equipment for item in released) == ["clamp", "nutrunner"]
    # Traced (observers of gateway_job_method_called: the web UI's trace) for j1 alone: a job
    # no longer there has no trace to add to.
    assert [
        (call["job_order_id"], call["method"], call["requested_by"], call["message"])
        for call in jobs.methods
    ] == [("j1", "Acknowledge", "operator ana", "released clamp")]
