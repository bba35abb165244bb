"""A job's state change is one guarded commit, on the documents the repository remembers: one
Redis command in the common case; a stale memory (another instance changed the job) is caught by
the commit's guard, or, for a refusal, by deciding again on what is stored."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway.jobmethods import JobMethod, MethodResult
from gateway.jobstates import JobState
from gateway.store import Store
from gateway.testing.redis_ha import packets_sent
from gateway_jobs.events import method_type
from gateway_jobs.methods import JobsMethods
from gateway_jobs.model import ReturnStatus
from gateway_jobs.processor import JobsProcessor
from gateway_jobs.repository import marked
from gateway_jobs.testing import LocalJobs, change_records, job_order, local_jobs, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
IDLE = work_master("wm", {})  # its recipe reports nothing when started


async def call(jobs: LocalJobs, method: JobMethod, job: str) -> MethodResult:
    arguments: dict[str, Any] = (
        {"JobOrder": job_order(job)} if method is JobMethod.STORE else {"JobOrderID": job}
    )
    return await JobsMethods(jobs.manager).call(SCOPE, method, arguments)


async def test_a_change_of_a_remembered_job_is_one_command(jobs: LocalJobs) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    assert (await call(jobs, JobMethod.STORE, "J1")).ok
    with packets_sent() as sent:
        aborted = await call(jobs, JobMethod.ABORT, "J1")
        cleared = await call(jobs, JobMethod.CLEAR, "J1")
    assert aborted.ok, aborted.message
    assert cleared.ok, cleared.message
    of_the_job = [packet for packet in sent if b":job:J1" in packet]
    assert len(of_the_job) == 2, sent  # one commit each, no read
    assert all(b"EVAL" in packet and b"MGET" not in packet for packet in of_the_job), sent
    states = [record.state for record in await change_records(jobs.manager.repository.store, SCOPE)]
    assert states == [JobState.NOT_ALLOWED_TO_START_READY, JobState.ABORTED, JobState.END]


async def test_a_stale_memory_fails_the_guard_and_the_change_is_decided_again(
    jobs: LocalJobs, store_factory: Callable[[], Store]
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    assert (await call(jobs, JobMethod.STORE, "J1")).ok  # remembered NotAllowedToStart
    async with store_factory() as other_store:
        other = local_jobs(other_store)
        assert (await call(other, JobMethod.START, "J1")).ok  # now AllowedToStart
    aborted = await call(jobs, JobMethod.ABORT, "J1")
    assert aborted.ok, aborted.message
    store = jobs.manager.repository.store
    last = (await change_records(store, SCOPE))[-1]
    assert (last.previous, last.state) == (JobState.ALLOWED_TO_START_READY, JobState.ABORTED)


async def test_a_refusal_decided_on_a_stale_memory_is_decided_again_on_what_is_stored(
    jobs: LocalJobs, store_factory: Callable[[], Store]
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    assert (await call(jobs, JobMethod.STORE, "J1")).ok  # remembered NotAllowedToStart
    async with store_factory() as other_store:
        other = local_jobs(other_store)
        assert (await call(other, JobMethod.START, "J1")).ok
    # RevokeStart is refused in NotAllowedToStart, allowed in AllowedToStart (as stored).
    revoked = await call(jobs, JobMethod.REVOKE_START, "J1")
    assert revoked.ok, revoked.message
    job = await jobs.manager.repository.load(SCOPE, "J1")
    assert job is not None
    assert job.state is JobState.NOT_ALLOWED_TO_START_READY


async def test_concurrent_stores_of_two_instances_never_overshoot_the_job_limit(
    store: Store, store_factory: Callable[[], Store]
) -> None:
    first = local_jobs(store, max_job_orders=3)
    await first.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    outcomes: list[MethodResult] = []
    async with store_factory() as other_store:
        second = local_jobs(other_store, max_job_orders=3)
        # Both remember the scope's configuration, and neither has counted the jobs.
        assert (await call(first, JobMethod.STORE, "warm-1")).ok
        assert (await call(second, JobMethod.STORE, "warm-2")).ok

        async def store_one(jobs: LocalJobs, job: str) -> None:
            outcomes.append(await call(jobs, JobMethod.STORE, job))

        async with anyio.create_task_group() as tasks:
            for number in range(8):
                tasks.start_soon(store_one, (first, second)[number % 2], f"J{number}")
    assert sum(outcome.ok for outcome in outcomes) == 1
    refused = [outcome.message or "" for outcome in outcomes if not outcome.ok]
    assert all(message.startswith("max_job_orders: ") for message in refused), refused
    assert await first.manager.repository.count(SCOPE) == 3


async def test_what_is_remembered_does_not_grow_with_the_jobs_done(jobs: LocalJobs) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    remembered = jobs.manager.repository.texts
    sizes = []
    for number in range(30):
        job = f"J{number}"
        for method in (JobMethod.STORE, JobMethod.ABORT, JobMethod.CLEAR):
            outcome = await call(jobs, method, job)
            assert outcome.ok, outcome.message
        sizes.append(len(remembered))
    assert sizes == [sizes[0]] * 30  # the configuration a Store checks, no job's documents


def method_call(method: str, data: dict[str, Any], event_id: str) -> CloudEvent:
    return CloudEvent(
        type=method_type(method), source="urn:mes", subject=SCOPE, id=event_id, data=data
    )


async def test_a_method_call_commits_its_de_duplication_marker_with_its_change(
    jobs: LocalJobs,
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    processor = JobsProcessor(jobs.manager, JobsMethods(jobs.manager), source="urn:test")
    dedupe = jobs.manager.repository.store.dedupe
    stored = method_call("Store", {"JobOrder": job_order("J1")}, "call-1")
    assert (await dedupe.claim(stored)).new
    with packets_sent() as sent:
        replies = await processor.handle(stored)
        await dedupe.complete(stored, replies)  # as the transport does: nothing left to write
    marker = dedupe.done(stored, replies).key.encode()
    assert [packet for packet in sent if marker in packet] == [
        packet for packet in sent if b":job:J1" in packet and b"EVAL" in packet
    ], sent  # the one commit of the change
    again = await dedupe.claim(stored)
    assert again.duplicate
    assert [reply.id for reply in again.replies] == [reply.id for reply in replies]
    assert replies[0].data == {"ReturnStatus": ReturnStatus.NO_ERROR.value}


async def test_a_refused_method_call_is_marked_done_by_the_transport_as_before(
    jobs: LocalJobs,
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    processor = JobsProcessor(jobs.manager, JobsMethods(jobs.manager), source="urn:test")
    dedupe = jobs.manager.repository.store.dedupe
    assert (await call(jobs, JobMethod.STORE, "J1")).ok
    duplicate = method_call("Store", {"JobOrder": job_order("J1")}, "call-2")
    assert (await dedupe.claim(duplicate)).new
    replies = await processor.handle(duplicate)
    assert replies[0].data == {"ReturnStatus": ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER.value}
    assert (await dedupe.claim(duplicate)).busy  # not marked by a commit: none was made
    await dedupe.complete(duplicate, replies)
    again = await dedupe.claim(duplicate)
    assert again.duplicate
    assert [reply.id for reply in again.replies] == [reply.id for reply in replies]


async def test_only_the_calls_own_change_commits_its_marker(jobs: LocalJobs) -> None:
    dedupe = jobs.manager.repository.store.dedupe
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    event = method_call("Store", {"JobOrder": job_order("J1")}, "call-3")
    with marked(SCOPE, dedupe.done(event, [])) as pending:
        assert (await call(jobs, JobMethod.STORE, "J1")).ok
        assert pending.written
        assert not (await dedupe.claim(event)).new  # marked done with the Store
        await jobs.manager.repository.store.client.delete(pending.marker.key)
        assert (await call(jobs, JobMethod.ABORT, "J1")).ok  # a later change: no marker
    assert (await dedupe.claim(event)).new


async def test_two_instances_changing_one_job_at_once_keep_its_records_a_chain(
    jobs: LocalJobs, store_factory: Callable[[], Store]
) -> None:
    """Each instance decides on what it remembers, often stale (the other changed the job):
    every change still follows the one before it, and each is recorded once."""
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", IDLE)
    assert (await call(jobs, JobMethod.STORE, "J1")).ok
    done: list[MethodResult] = []
    async with store_factory() as other_store:
        other = local_jobs(other_store)

        async def toggle(instance: LocalJobs) -> None:
            for _ in range(15):
                for method in (JobMethod.START, JobMethod.REVOKE_START):
                    done.append(await call(instance, method, "J1"))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(toggle, jobs)
            tasks.start_soon(toggle, other)
    records = await change_records(jobs.manager.repository.store, SCOPE)
    assert len(records) == 1 + sum(result.ok for result in done)
    for before, after in pairwise(records):
        assert after.previous == before.state, (before, after)
