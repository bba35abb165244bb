"""Every method in every state on real Redis: the status returned; illegal calls change nothing.

The expected moves are written out here from OPC 40001-3 (ISA95-JOBCONTROL v2, 6.2.1), not read
from the implementation's table. The calls go to the job manager directly (no MQTT, for speed);
``test_mqtt_commands`` repeats representative cases over MQTT.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.recipes import JobOutcome, ProcessValue
from gateway.store import Store
from gateway_jobs.events import Cause
from gateway_jobs.model import (
    JobOrder,
    JobOrderCall,
    JobOrderIDCall,
    ReturnStatus,
    WorkMaster,
)
from gateway_jobs.testing import LocalJobs, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
JOB = "job-1"
PREPARED = ["NotAllowedToStart.Ready", "AllowedToStart.Ready"]
INTERRUPTED = ["Interrupted.Held", "Interrupted.Suspended"]
ACTIVE = ["Running", *INTERRUPTED]
FINAL = ["Ended.Completed", "Ended.Closed", "Aborted"]
STATES = ["InitialState", *PREPARED, *ACTIVE, *FINAL, "EndState"]

# MES method -> {source state: destination}; every other state refuses it.
MOVES: dict[str, dict[str, str]] = {
    "Store": {"InitialState": "NotAllowedToStart.Ready", "EndState": "NotAllowedToStart.Ready"},
    "StoreAndStart": {"InitialState": "AllowedToStart.Ready", "EndState": "AllowedToStart.Ready"},
    "Start": {"NotAllowedToStart.Ready": "AllowedToStart.Ready"},
    "RevokeStart": {"AllowedToStart.Ready": "NotAllowedToStart.Ready"},
    "Update": {state: state for state in PREPARED},
    "Pause": {"Running": "Interrupted.Suspended"},
    "Resume": dict.fromkeys(INTERRUPTED, "Running"),
    "Stop": dict.fromkeys(ACTIVE, "Ended.Closed"),
    "Abort": dict.fromkeys([*PREPARED, *ACTIVE], "Aborted"),
    "Cancel": dict.fromkeys(PREPARED, "EndState"),
    "Clear": dict.fromkeys(FINAL, "EndState"),
}
# JobControl call -> (trigger in the change stream, {source state: destination}).
RECIPE_MOVES: dict[str, tuple[str, dict[str, str]]] = {
    "run": ("Run", {"AllowedToStart.Ready": "Running"}),
    "complete": ("Complete", {"Running": "Ended.Completed"}),
    "abort": ("Fail", dict.fromkeys(ACTIVE, "Aborted")),
    "hold": ("Hold", {"Running": "Interrupted.Held"}),
    "record_results": ("ResultUpdate", {state: state for state in [*ACTIVE, *FINAL]}),
}
# How each state is reached.
SETUP: dict[str, list[str]] = {
    "InitialState": [],
    "NotAllowedToStart.Ready": ["Store"],
    "AllowedToStart.Ready": ["StoreAndStart"],
    "Running": ["StoreAndStart", "run"],
    "Interrupted.Held": ["StoreAndStart", "run", "hold"],
    "Interrupted.Suspended": ["StoreAndStart", "run", "Pause"],
    "Ended.Completed": ["StoreAndStart", "run", "complete"],
    "Ended.Closed": ["StoreAndStart", "run", "Stop"],
    "Aborted": ["Store", "Abort"],
    "EndState": ["Store", "Cancel"],  # cancelled: gone from the station
}


def expected_status(method: str, state: str) -> ReturnStatus:
    if state in MOVES[method]:
        return ReturnStatus.NO_ERROR
    if method in ("Store", "StoreAndStart"):
        return ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER  # duplicate: never overwritten
    if state in ("InitialState", "EndState"):
        return ReturnStatus.UNKNOWN_JOB_ORDER_ID
    return ReturnStatus.INVALID_JOB_ORDER_STATUS


async def call(jobs: LocalJobs, method: str, job: str = JOB) -> ReturnStatus | bool:
    """Call an MES method (ReturnStatus) or a JobControl method (bool) on ``job``."""
    manager, control = jobs.manager, jobs.control
    cause = Cause(correlationid=None, causationid="test")
    order = JobOrder(job, work_master_id=[WorkMaster("wm")], priority=3)
    if method in ("Store", "StoreAndStart"):
        return (await manager.store(SCOPE, method, JobOrderCall(order), cause)).status
    if method == "Update":
        order.priority = 9
        return (await manager.update(SCOPE, JobOrderCall(order), cause)).status
    if method in MOVES:
        return (await manager.act(SCOPE, method, JobOrderIDCall(job), cause)).status
    if method == "run":
        return await control.run(SCOPE, job)
    if method == "complete":
        return await control.complete(SCOPE, job, JobOutcome([ProcessValue("torque", 40.5)]))
    if method == "abort":
        return await control.abort(SCOPE, job, JobOutcome(error="boom", side_effects=True))
    if method == "hold":
        return await control.hold(SCOPE, job, "tool jammed")
    return await control.record_results(SCOPE, job, [ProcessValue("count", 3)])


async def snapshot(store: Store, job: str = JOB) -> dict[str, Any]:
    """Everything a change could touch: documents, indexes, the change stream."""
    client, keys = store.client, store.keys
    tops = ["NotAllowedToStart", "AllowedToStart", "Running", "Interrupted", "Ended", "Aborted"]
    return {
        "job": await client.get(keys.scoped(SCOPE, "job", job)),
        "response": await client.get(keys.scoped(SCOPE, "jobresponse", job)),
        "priority": await client.zrange(keys.scoped(SCOPE, "jobs", "by-priority"), 0, -1),
        "states": {
            top: sorted(await client.smembers(keys.scoped(SCOPE, "jobs", "state", top)))
            for top in tops
        },
        "changes": await client.xrange(keys.changes(SCOPE)),
    }


@pytest.fixture
async def configured(jobs: LocalJobs) -> LocalJobs:
    """A scope with Work Master ``wm`` whose scripted recipe waits to be driven."""
    outcome = await jobs.manager.config.apply(
        SCOPE, "workmaster", "PUT", work_master("wm", {"run": False})
    )
    assert outcome.ok
    return jobs


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("method", [*MOVES, *RECIPE_MOVES])
async def test_every_method_in_every_state(
    configured: LocalJobs, store: Store, method: str, state: str
) -> None:
    jobs = configured
    for step in SETUP[state]:
        assert await call(jobs, step) in (ReturnStatus.NO_ERROR, True), step
    before = await snapshot(store)
    events_before = len(jobs.events.events)

    result = await call(jobs, method)

    if method in RECIPE_MOVES:
        trigger, moves = RECIPE_MOVES[method]
        target = moves.get(state)
        assert result is (target is not None)
    else:
        trigger, target = method, MOVES[method].get(state)
        assert result == expected_status(method, state)
    if target is None:
        assert await snapshot(store) == before
        assert len(jobs.events.events) == events_before
        return
    after = await snapshot(store)
    assert await jobs.control.state(SCOPE, JOB) == (None if target == "EndState" else target)
    new_records = after["changes"][len(before["changes"]) :]
    assert [fields["change_type"] for _, fields in new_records] == [trigger]
    assert new_records[0][1]["state"] == target
    if trigger == "ResultUpdate":  # no state change: no status event
        assert len(jobs.events.events) == events_before
    else:
        _, event = jobs.events.events[-1]
        states = [entry["StateText"]["Text"] for entry in event.data["JobState"]]
        assert ".".join(states) == target
