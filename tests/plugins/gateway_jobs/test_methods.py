"""The job methods northbound protocols call, and the status feed they follow (real Redis)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from gateway.changes import ReadPace
from gateway.errors import ValidationError
from gateway.jobmethods import JobMethod, JobStatus, StatusFeed
from gateway.store import Store
from gateway.testing import HeldPauses, wait_until
from gateway_jobs.feed import status_feed
from gateway_jobs.methods import JobsMethods
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import LocalJobs, job_order, local_jobs, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


async def next_status(feed: StatusFeed) -> JobStatus:
    with anyio.fail_after(10):
        return await feed.__aiter__().__anext__()


async def test_a_job_is_stored_run_and_cleared_and_the_feed_tells_each_step(
    jobs: LocalJobs,
) -> None:
    methods = JobsMethods(jobs.manager)
    recipe = {"run": True, "complete": {"torque": 42.5}}
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm", recipe))
    async with methods.status_feed([SCOPE]) as feed:
        stored = await methods.call(SCOPE, JobMethod.STORE, {"JobOrder": job_order("J1")})
        assert stored.ok, stored.message
        assert (await next_status(feed)).state == "NotAllowedToStart.Ready"
        listed = await methods.job_orders(SCOPE)
        assert [entry["JobOrder"]["JobOrderID"] for entry in listed] == ["J1"]

        started = await methods.call(SCOPE, JobMethod.START, {"JobOrderID": "J1"})
        assert started.ok
        seen = [await next_status(feed) for _ in range(3)]  # Start, Run, Complete
        assert [status.method for status in seen] == ["Start", "Run", "Complete"]
        ended = seen[-1]
        assert ended.state == "Ended.Completed"
        assert ended.job_order["JobOrderID"] == "J1"
        assert [entry["StateText"]["Text"] for entry in ended.job_state] == ["Ended", "Completed"]
        assert (
            ended.job_response["JobResponseData"][2]["Value"] == 42.5
        )  # after RecipeVersion, WorkMasterID

        query = JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID
        response = await methods.call(SCOPE, query, {"JobOrderID": "J1"})
        assert response.output["JobResponse"]["JobOrderID"] == "J1"

        assert (await methods.call(SCOPE, JobMethod.CLEAR, {"JobOrderID": "J1"})).ok
        cleared = await next_status(feed)
        # The job left the station; the event still carries its order and final response.
        assert (cleared.state, cleared.job_order["JobOrderID"]) == ("EndState", "J1")
        assert cleared.job_response["JobResponseData"][2]["Value"] == 42.5
    assert await methods.job_orders(SCOPE) == []


async def test_a_feed_of_states_alone_reads_no_documents(
    jobs: LocalJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``documents=False`` (the recipe runtime follows job ends so): the same states, each
    event with only what its change carries, and no job read for it."""
    methods = JobsMethods(jobs.manager)
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm", {"run": True}))
    repository = jobs.manager.repository
    load, loads = repository.load, 0

    async def counted_load(scope: str, job_order_id: str) -> object:
        nonlocal loads
        loads += 1
        return await load(scope, job_order_id)

    async with methods.status_feed([SCOPE], documents=False) as feed:
        monkeypatch.setattr(repository, "load", counted_load)  # the calls' own loads counted too
        stored = await methods.call(SCOPE, JobMethod.STORE, {"JobOrder": job_order("J1")})
        assert stored.ok, stored.message
        calls_loads = loads
        status = await next_status(feed)
        assert (status.method, status.state) == ("Store", "NotAllowedToStart.Ready")
        assert status.job_order["JobOrderID"] == "J1"  # a Store's change carries its order
        assert set(status.job_response) == {"JobResponseID", "JobOrderID", "JobState"}
        assert loads == calls_loads


async def test_the_feed_hears_changes_another_instance_makes(
    jobs: LocalJobs, store_factory: Callable[[], Store]
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master())
    async with store_factory() as other_store:
        other = JobsMethods(local_jobs(other_store).manager)
        async with JobsMethods(jobs.manager).status_feed([SCOPE, "cell2"]) as feed:
            stored = await other.call(SCOPE, JobMethod.STORE, {"JobOrder": job_order("J2")})
            assert stored.ok, stored.message
            status = await next_status(feed)
    assert (status.scope, status.job_order_id, status.method) == (SCOPE, "J2", "Store")


async def test_bad_arguments_raise_and_refusals_are_statuses(jobs: LocalJobs) -> None:
    methods = JobsMethods(jobs.manager)
    with pytest.raises(ValidationError, match=r"data\.JobOrderID"):
        await methods.call(SCOPE, JobMethod.START, {"JobOrderID": 7})
    unknown = await methods.call(SCOPE, JobMethod.START, {"JobOrderID": "nope"})
    assert unknown.return_status == ReturnStatus.UNKNOWN_JOB_ORDER_ID
    assert unknown.message is not None
    assert unknown.message.startswith("unknown:")


async def test_a_paced_feed_reads_the_changes_of_a_busy_spell_at_once(
    jobs: LocalJobs, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe runtime follows job ends so: the first change after a quiet spell comes at
    once, the ones that follow it within the pace come together, with one read."""
    methods = JobsMethods(jobs.manager)
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master())
    read, reads = store.read_streams, 0

    async def counted_read(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(*args, **kwargs)

    monkeypatch.setattr(store, "read_streams", counted_read)
    pauses = HeldPauses()
    pace = ReadPace(60.0, clock=lambda: 0.0, sleep=pauses)
    repository = jobs.manager.repository
    async with status_feed(store, repository, [SCOPE], documents=False, pace=pace) as feed:
        assert (await methods.call(SCOPE, JobMethod.STORE, {"JobOrder": job_order("J0")})).ok
        assert (await next_status(feed)).job_order_id == "J0"
        await wait_until(lambda: len(pauses.held) == 1)  # it would wait 60 s for more
        before = reads
        for job in ("J1", "J2", "J3"):
            assert (await methods.call(SCOPE, JobMethod.STORE, {"JobOrder": job_order(job)})).ok
        pauses.end()
        burst = [(await next_status(feed)).job_order_id for _ in range(3)]
        await wait_until(lambda: len(pauses.held) == 2)  # pausing again: no read meanwhile
        assert reads - before == 1
    assert burst == ["J1", "J2", "J3"]
