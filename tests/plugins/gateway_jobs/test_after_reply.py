"""What follows a change runs after the reply: the dispatch pass, the retained queue, and the
broker's acknowledgement of the status event.

The MES's call returns once its change is stored and its status event sent; the acknowledgement
of that event, the dispatch pass and the queue topic follow in the background, the last two
merged per scope (``coalesce``), the topic at most every ``queue_feed_ms`` and bounded to
``queue_feed_jobs`` jobs per list.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import pairwise
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gateway.cloudevents import CloudEvent
from gateway.store import Store
from gateway.testing import wait_until
from gateway_jobs.coalesce import Coalescer
from gateway_jobs.events import Cause
from gateway_jobs.model import JobOrder, JobOrderCall, from_json
from gateway_jobs.queue import QueueEntry, QueueView
from gateway_jobs.queuefeed import QueueFeed, queue_document
from gateway_jobs.testing import LocalJobs, job_order, local_jobs, work_master

pytestmark = pytest.mark.anyio

SCOPE = "cell1"
CAUSE = Cause(correlationid=None, causationid="test")


@asynccontextmanager
async def served(*coalescers: Coalescer) -> AsyncIterator[None]:
    """The coalescers run their work in the background, as the gateway's services do."""
    async with anyio.create_task_group() as tasks:
        for coalescer in coalescers:
            tasks.start_soon(coalescer.serve)
        await wait_until(lambda: all(coalescer.serving for coalescer in coalescers))
        yield
        tasks.cancel_scope.cancel()


class Gate:
    """Work that blocks until opened, and counts how many runs were in flight at once."""

    def __init__(self) -> None:
        self.opened = anyio.Event()
        self.runs: list[tuple[str, float]] = []  # (scope, when it started)
        self.in_flight = 0
        self.most_in_flight = 0

    async def work(self, scope: str) -> None:
        self.runs.append((scope, time.monotonic()))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.opened.wait()
        finally:
            self.in_flight -= 1


# -- the coalescer ----------------------------------------------------------------------------


async def test_requests_while_a_run_is_in_flight_merge_into_one_more_run() -> None:
    gate = Gate()
    coalescer = Coalescer("test", gate.work)
    async with served(coalescer):
        await coalescer.request(SCOPE)
        await wait_until(lambda: gate.in_flight == 1)
        for _ in range(50):
            await coalescer.request(SCOPE)  # returns at once: the first run still blocks
        await coalescer.request("other")  # another scope is not held up by this one
        await wait_until(lambda: len(gate.runs) == 2)
        gate.opened.set()
        await wait_until(coalescer.idle)
    assert [scope for scope, _ in gate.runs] == [SCOPE, "other", SCOPE]
    assert gate.most_in_flight == 2  # one per scope


async def test_runs_of_a_scope_start_at_least_the_interval_apart() -> None:
    gate = Gate()
    gate.opened.set()
    interval = 0.25
    coalescer = Coalescer("test", gate.work, interval=interval)
    requests = 0
    async with served(coalescer):
        deadline = time.monotonic() + 4 * interval
        while time.monotonic() < deadline:  # a burst of changes for a whole second
            await coalescer.request(SCOPE)
            requests += 1
            await anyio.sleep(0.005)
        last_request = time.monotonic()
        await wait_until(coalescer.idle)
    starts = [when for _, when in gate.runs]
    # anyio's timers may wake a clock tick early: a millisecond of slack.
    assert all(later - earlier >= interval - 0.001 for earlier, later in pairwise(starts))
    # One run per interval of the burst, and one after its last request: not one per request.
    assert 2 <= len(starts) <= 2 + (last_request - starts[0]) / interval < requests


async def test_unserved_requests_run_in_the_caller() -> None:
    gate = Gate()
    gate.opened.set()
    coalescer = Coalescer("test", gate.work)
    await coalescer.request(SCOPE)
    assert [scope for scope, _ in gate.runs] == [SCOPE]


async def test_stopping_cancels_the_runs_in_flight() -> None:
    gate = Gate()  # never opened
    coalescer = Coalescer("test", gate.work)
    async with served(coalescer):
        await coalescer.request(SCOPE)
        await wait_until(lambda: gate.in_flight == 1)
    assert gate.in_flight == 0
    assert not coalescer.serving


# -- the MES's reply --------------------------------------------------------------------------


async def store_and_start(jobs: LocalJobs, job: str) -> None:
    order = from_json(job_order(job), JobOrder)
    outcome = await jobs.manager.store(SCOPE, "StoreAndStart", JobOrderCall(order), CAUSE)
    assert outcome.ok, outcome.message


@pytest.mark.integration
async def test_the_reply_does_not_wait_for_the_dispatch_pass(store: Store) -> None:
    jobs = local_jobs(store, max_running_job_orders=0)
    assert (await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm"))).ok
    dispatcher = jobs.manager.dispatcher
    handed_over = dispatcher.start
    gate = Gate()

    async def slow_start(scope: str, job: str) -> None:  # an interpreter that takes its time
        await gate.work(scope)
        await handed_over(scope, job)

    dispatcher.start = slow_start
    async with served(dispatcher.passes):
        with anyio.fail_after(5):  # inline, the pass would hold this call until the gate opens
            await store_and_start(jobs, "J1")
            await store_and_start(jobs, "J2")
        # Each reply came once its status event was out, while the hand-over still waits.
        states = [event.data["JobState"][0]["StateText"]["Text"] for _, event in jobs.events.events]
        assert states == ["AllowedToStart", "AllowedToStart"]
        assert jobs.interpreter.started == []
        gate.opened.set()
        await wait_until(lambda: sorted(jobs.interpreter.started) == ["J1", "J2"])


@pytest.mark.integration
async def test_the_reply_does_not_wait_for_the_status_event_to_be_acknowledged(
    store: Store,
) -> None:
    jobs = local_jobs(store, max_running_job_orders=0)
    assert (await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm"))).ok
    sent: list[tuple[str, str]] = []
    acknowledged = anyio.Event()

    class SlowBroker:
        async def publish(self, scope: str, event: CloudEvent) -> None:
            state = event.data["JobState"][0]["StateText"]["Text"]
            sent.append((event.data["JobOrder"]["JobOrderID"], state))
            await acknowledged.wait()

    jobs.manager.events.sink = SlowBroker()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(jobs.manager.events.serve)
        await wait_until(lambda: jobs.manager.events.serving)
        with anyio.fail_after(5):  # inline, each call would wait for the acknowledgement
            await store_and_start(jobs, "J1")
            await store_and_start(jobs, "J2")
        stored = [("J1", "AllowedToStart"), ("J2", "AllowedToStart")]
        await wait_until(lambda: [event for event in sent if event in stored] == stored)
        acknowledged.set()
        tasks.cancel_scope.cancel()


# -- the retained queue -----------------------------------------------------------------------


class RecordingBinding:
    """A binding that keeps what is published (only ``publish`` is used by the feed)."""

    name = "recording"

    def __init__(self) -> None:
        self.published: list[tuple[str, CloudEvent]] = []

    async def publish(self, topic: str, event: CloudEvent, **options: Any) -> None:
        self.published.append((topic, event))


def view(running: int, waiting: int) -> QueueView:
    return QueueView(
        online=True,
        reason=None,
        capacity=0,
        admitted={f"R{n:03}": ("eq",) for n in range(running)},
        waiting=[QueueEntry(f"W{n:03}", 0, None, (), n, n) for n in range(1, waiting + 1)],
    )


async def test_a_burst_of_changes_reads_and_publishes_the_queue_twice() -> None:
    """The first change publishes at once; the rest of the burst, once, after the interval."""
    binding = RecordingBinding()
    reads: list[float] = []

    async def read(scope: str) -> QueueView:
        reads.append(time.monotonic())
        return view(running=len(reads), waiting=0)  # what it shows changes every time

    # An interval long enough for the burst below on a busy machine: it all falls within it.
    feed = QueueFeed(binding, "jobs", "urn:test", read, interval=1.0)  # type: ignore[arg-type]
    async with served(feed.updates):
        await feed.changed(SCOPE)
        await wait_until(lambda: len(reads) == 1)
        for _ in range(200):
            await feed.changed(SCOPE)
            await anyio.lowlevel.checkpoint()  # let the feed run if it would
        await wait_until(feed.updates.idle)
    assert len(reads) == 2
    assert reads[1] - reads[0] >= 1.0 - 0.001
    assert [topic for topic, _ in binding.published] == ["jobs/cell1/queue"] * 2


def test_the_queue_document_lists_the_first_jobs_and_counts_them_all() -> None:
    document = queue_document(SCOPE, view(running=300, waiting=1000), limit=3)
    assert (document["RunningCount"], document["WaitingCount"]) == (300, 1000)
    assert [job["JobOrderID"] for job in document["Running"]] == ["R000", "R001", "R002"]
    assert [job["Position"] for job in document["Waiting"]] == [1, 2, 3]


async def test_the_queue_a_pass_hands_over_is_published_without_a_read() -> None:
    """A dispatch pass hands the feed the queue as it left it: the newest one handed over is
    published, and nothing is read."""
    binding = RecordingBinding()
    reads: list[str] = []

    async def read(scope: str) -> QueueView:
        reads.append(scope)
        return view(running=0, waiting=0)

    feed = QueueFeed(binding, "jobs", "urn:test", read, interval=1.0)  # type: ignore[arg-type]
    async with served(feed.updates):
        await feed.changed(SCOPE, view(running=1, waiting=0))
        await wait_until(lambda: len(binding.published) == 1)
        for waiting in range(1, 4):  # within the interval: the last one is what goes out
            await feed.changed(SCOPE, view(running=1, waiting=waiting))
        await wait_until(feed.updates.idle)
    assert reads == []
    assert [event.data["WaitingCount"] for _, event in binding.published] == [0, 3]
