"""The queue and the dispatcher's decisions, on a real Redis, with an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.jobstates import TopState
from gateway.store import Store
from gateway.testing.redis_ha import packets_sent
from gateway_jobs.events import Cause
from gateway_jobs.model import JobOrder as JobOrderModel
from gateway_jobs.model import JobOrderCall, JobOrderIDCall, from_json
from gateway_jobs.queue import start_seconds
from gateway_jobs.testing import LocalJobs, job_order, local_jobs, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
CAUSE = Cause(correlationid=None, causationid="test")
T0 = 1_800_000_000.0  # the injected "now"


async def configured(jobs: LocalJobs, *equipment: str) -> None:
    manager = jobs.manager
    assert (await manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm"))).ok
    if equipment:
        items = [{"ID": name} for name in equipment]
        assert (await manager.config.apply(SCOPE, "equipment", "PUT", items)).ok


async def submit(jobs: LocalJobs, job: str, method: str = "StoreAndStart", **fields: Any) -> None:
    order = from_json(job_order(job, **fields), JobOrderModel)
    outcome = await jobs.manager.store(SCOPE, method, JobOrderCall(order), CAUSE)
    assert outcome.ok, outcome.message


async def act(jobs: LocalJobs, method: str, job: str) -> None:
    outcome = await jobs.manager.act(SCOPE, method, JobOrderIDCall(job), CAUSE)
    assert outcome.ok, outcome.message


def needs(*equipment: str) -> list[dict[str, str]]:
    return [{"ID": name} for name in equipment]


async def test_capacity_one_runs_the_highest_priority_first(jobs: LocalJobs) -> None:
    await configured(jobs)
    for job, priority in (("p1", 1), ("p5", 5), ("p3", 3)):
        await submit(jobs, job, "Store", priority=priority)
    jobs.manager.dispatcher.clock = lambda: T0
    await jobs.manager.configure(SCOPE, "online", "PUT", {"Online": False})
    for job in ("p1", "p5", "p3"):
        await act(jobs, "Start", job)
    assert jobs.interpreter.started == []
    view = await jobs.manager.dispatcher.queue(SCOPE)
    assert [entry.job_order_id for entry in view.waiting] == ["p5", "p3", "p1"]
    assert not view.online
    await jobs.manager.configure(SCOPE, "online", "DELETE", None)
    assert jobs.interpreter.started == ["p5"]  # capacity 1: the others wait
    for running, after in (("p5", ["p5", "p3"]), ("p3", ["p5", "p3", "p1"])):
        await act(jobs, "Stop", running)
        assert jobs.interpreter.started == after


async def test_the_queue_is_read_in_one_command(jobs: LocalJobs) -> None:
    await configured(jobs, "press")
    await jobs.manager.configure(SCOPE, "online", "PUT", {"Online": False, "Reason": "shift"})
    await submit(jobs, "waits", priority=2, EquipmentRequirements=needs("press"))
    await submit(jobs, "later", StartTime="2027-01-15T10:00:00Z")
    await jobs.manager.dispatcher.queue(SCOPE)  # the script loaded on a first call
    with packets_sent() as sent:
        view = await jobs.manager.dispatcher.queue(SCOPE)
    assert [packet.split(b"\r\n")[2] for packet in sent] == [b"EVALSHA"]
    assert (view.online, view.reason, view.admitted) == (False, "shift", {})
    assert [(e.job_order_id, e.position, e.equipment) for e in view.waiting] == [
        ("waits", 1, ("press",)),
        ("later", 2, ()),
    ]
    assert view.waiting[1].start_time == start_seconds("2027-01-15T10:00:00Z")
    assert view.waiting[0].arrival < view.waiting[1].arrival


async def test_queue_position_is_in_the_job_response(jobs: LocalJobs) -> None:
    await configured(jobs)
    await submit(jobs, "first")
    await submit(jobs, "low", priority=1)
    await submit(jobs, "high", priority=9)
    positions = {}
    for job in ("first", "low", "high"):
        reply = await jobs.manager.job_response(SCOPE, job)
        assert reply.job_response is not None
        data = {entry.id: entry.value for entry in reply.job_response.job_response_data or []}
        positions[job] = data.get("QueuePosition")
    assert positions == {"first": None, "high": 1, "low": 2}
    listed = await jobs.manager.job_responses(SCOPE, TopState.ALLOWED_TO_START)
    by_state = {
        response.job_order_id: {e.id: e.value for e in response.job_response_data or []}.get(
            "QueuePosition"
        )
        for response in listed.job_responses or []
    }
    assert by_state == {"high": 1, "low": 2}


async def test_a_job_does_not_start_before_its_start_time(jobs: LocalJobs) -> None:
    await configured(jobs)
    now = [T0]
    jobs.manager.dispatcher.clock = lambda: now[0]
    start = "2027-01-15T08:00:30Z"  # T0 + 30 s
    assert start_seconds(start) == T0 + 30
    await submit(jobs, "later", StartTime=start, priority=9)
    await submit(jobs, "now", priority=1)
    assert jobs.interpreter.started == ["now"]  # a future job reserves nothing
    await act(jobs, "Stop", "now")
    assert jobs.interpreter.started == ["now"]
    now[0] = T0 + 29.9
    assert await jobs.manager.dispatcher.dispatch(SCOPE) == []
    now[0] = T0 + 30
    assert await jobs.manager.dispatcher.dispatch(SCOPE) == ["later"]
    assert jobs.interpreter.started == ["now", "later"]


async def test_equal_priorities_go_by_start_time_then_arrival(jobs: LocalJobs) -> None:
    await configured(jobs)
    jobs.manager.dispatcher.clock = lambda: T0 + 100
    await jobs.manager.configure(SCOPE, "online", "PUT", {"Online": False, "Reason": "test"})
    await submit(jobs, "a")
    await submit(jobs, "b", StartTime="2027-01-15T08:00:10Z")
    await submit(jobs, "c", StartTime="2027-01-15T08:00:05Z")
    await submit(jobs, "d")
    view = await jobs.manager.dispatcher.queue(SCOPE)
    assert view.reason == "test"
    assert [entry.job_order_id for entry in view.waiting] == ["a", "d", "c", "b"]


async def test_equipment_conflicts_serialise_and_disjoint_jobs_run_beside(
    jobs: LocalJobs,
) -> None:
    await configured(jobs, "A", "B")
    await jobs.manager.configure(SCOPE, "jobacceptance", "PUT", {"max_running_job_orders": 2})
    await submit(jobs, "a1", EquipmentRequirements=needs("A"))
    await submit(jobs, "a2", EquipmentRequirements=needs("A"))
    await submit(jobs, "b1", EquipmentRequirements=needs("B"))
    assert jobs.interpreter.started == ["a1", "b1"]
    view = await jobs.manager.dispatcher.queue(SCOPE)
    assert view.capacity == 2  # the scope's MaxRunningJobOrders, over the setting's 1
    assert view.admitted == {"a1": ("A",), "b1": ("B",)}
    await act(jobs, "Abort", "a1")
    assert jobs.interpreter.started == ["a1", "b1", "a2"]


async def test_a_waiting_higher_job_reserves_its_equipment(jobs: LocalJobs) -> None:
    """A lower job may not take equipment a higher waiting job needs (no starvation)."""
    await configured(jobs, "A", "B")
    await jobs.manager.configure(SCOPE, "jobacceptance", "PUT", {"MaxRunningJobOrders": 0})
    await submit(jobs, "holder", EquipmentRequirements=needs("A"))
    await submit(jobs, "high", priority=9, EquipmentRequirements=needs("A", "B"))
    await submit(jobs, "low", priority=1, EquipmentRequirements=needs("B"))
    assert jobs.interpreter.started == ["holder"]  # low would take B from high
    await act(jobs, "Stop", "holder")
    assert jobs.interpreter.started == ["holder", "high"]


async def test_revoke_update_and_cancel_work_on_a_queued_job(jobs: LocalJobs) -> None:
    await configured(jobs)
    await submit(jobs, "running")
    await submit(jobs, "x", priority=1)
    await submit(jobs, "y", priority=2)
    update = from_json(job_order("x", priority=5), JobOrderModel)
    assert (await jobs.manager.update(SCOPE, JobOrderCall(update), CAUSE)).ok
    view = await jobs.manager.dispatcher.queue(SCOPE)
    assert [entry.job_order_id for entry in view.waiting] == ["x", "y"]
    await act(jobs, "RevokeStart", "x")
    await act(jobs, "Cancel", "y")
    assert (await jobs.manager.dispatcher.queue(SCOPE)).waiting == []
    await act(jobs, "Stop", "running")
    assert jobs.interpreter.started == ["running"]


async def test_entries_of_jobs_no_longer_there_are_dropped(store: Store) -> None:
    """What a crash or a hand edit left behind cannot hold a slot for ever."""
    jobs = local_jobs(store)
    await configured(jobs)
    await submit(jobs, "gone")
    keys = jobs.manager.dispatcher.keys
    # The job vanished without its allocation being released (as if edited by hand).
    await store.client.delete(jobs.manager.repository.job_key(SCOPE, "gone"))
    await store.client.srem(jobs.manager.repository.state_key(SCOPE, TopState.RUNNING), "gone")
    await submit(jobs, "next")
    assert jobs.interpreter.started == ["gone"]  # a dispatch after a change trusts the entries
    await jobs.manager.dispatcher.sweep()  # the periodic pass checks them against the states
    assert await store.client.hkeys(keys.admitted(SCOPE)) == ["next"]
    assert jobs.interpreter.started == ["gone", "next"]


async def test_unlimited_capacity_setting(store: Store) -> None:
    jobs = local_jobs(store, max_running_job_orders=0)
    await configured(jobs)
    for job in ("a", "b", "c"):
        await submit(jobs, job)
    assert jobs.interpreter.started == ["a", "b", "c"]


async def test_jobs_allowed_to_start_without_a_queue_entry_are_adopted(jobs: LocalJobs) -> None:
    """A job stored by a gateway without the queue still gets its turn."""
    await configured(jobs)
    await jobs.manager.configure(SCOPE, "online", "PUT", {"Online": False})
    await submit(jobs, "old", priority=3)
    await submit(jobs, "older", priority=7)
    keys = jobs.manager.dispatcher.keys
    store = jobs.manager.repository.store
    await store.client.delete(keys.waiting(SCOPE), keys.arrival(SCOPE))  # as before the queue
    assert (await jobs.manager.dispatcher.queue(SCOPE)).waiting == []
    await jobs.manager.configure(SCOPE, "online", "DELETE", None)
    assert jobs.interpreter.started == []
    await jobs.manager.dispatcher.sweep()
    assert jobs.interpreter.started == ["older"]
    view = await jobs.manager.dispatcher.queue(SCOPE)
    assert [entry.job_order_id for entry in view.waiting] == ["old"]


async def test_a_pass_hands_its_feed_the_queue_as_it_left_it_without_a_read(
    jobs: LocalJobs,
) -> None:
    """What the retained queue topic shows comes with the dispatch script's reply: the same
    view ``read_queue`` gives, and no read of its own."""
    await configured(jobs, "e1", "e2")
    dispatcher = jobs.manager.dispatcher
    dispatcher.clock = lambda: T0
    await submit(jobs, "run1", EquipmentRequirements=needs("e1"), priority=1)
    await dispatcher.block(SCOPE, "failed", ["e2"], "unsafe rollback")
    await jobs.manager.configure(SCOPE, "jobacceptance", "PUT", {"MaxRunningJobOrders": 2})
    handed: list[Any] = []

    async def feed(scope: str, view: Any) -> None:
        handed.append((scope, view))

    reads = 0
    queue = dispatcher.queue

    async def counted(scope: str) -> Any:
        nonlocal reads
        reads += 1
        return await queue(scope)

    dispatcher.feed = feed
    dispatcher.queue = counted  # type: ignore[method-assign]
    await submit(jobs, "wait1", EquipmentRequirements=needs("e1"), priority=5)  # e1 is held
    await submit(jobs, "wait2", EquipmentRequirements=needs("e2"))  # e2 is blocked
    assert reads == 0
    scope, view = handed[-1]
    assert scope == SCOPE
    assert view == await queue(SCOPE)
    assert [entry.job_order_id for entry in view.waiting] == ["wait1", "wait2"]
    assert (view.capacity, dict(view.admitted), set(view.blocked)) == (2, {"run1": ("e1",)}, {"e2"})
    await jobs.manager.configure(SCOPE, "online", "PUT", {"Online": False, "Reason": "shift"})
    offline = handed[-1][1]
    assert (offline.online, offline.reason) == (False, "shift")
    assert offline == await queue(SCOPE)


async def test_the_periodic_pass_looks_for_unqueued_jobs_in_its_script(
    jobs: LocalJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every instance's sweep, every second: one script per scope, no read of its own."""
    await configured(jobs)
    await submit(jobs, "j1")
    dispatcher = jobs.manager.dispatcher
    client = dispatcher.store.client
    pipeline, pipelines = client.pipeline, 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal pipelines
        pipelines += 1
        return pipeline(*args, **kwargs)

    monkeypatch.setattr(client, "pipeline", counted)
    await dispatcher.sweep()
    assert pipelines == 0
    assert jobs.interpreter.started == ["j1"]
