"""The job trace writer on a redis-server of its own: one XADD per job and flush, all of a
scope's in one script call, ``ui.trace_flush_ms`` after the first entry came; what is queued
survives an outage (the test kills and restarts Redis) and is written when the gateway stops."""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import anyio
import pytest
from redis.asyncio import Redis

from gateway.jobstates import JobState
from gateway.resilience import Readiness, Resilience
from gateway.store import KeySchema
from gateway.testing import wait_until
from gateway.testing.redis_ha import packets_sent
from gateway.testing.services import redis_server
from gateway_ui.settings import UiSettings
from gateway_ui.trace import TraceEntry, TraceKind, position, read_trace
from gateway_ui.trace_writer import HAPPENINGS_PER_ENTRY, HAPPENINGS_PER_WRITE, TraceWriter

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import TraceBench

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
Entry = tuple[str, dict[str, str]]


def started(job: str, scope: str = SCOPE) -> TraceEntry:
    fields = {"method": "StoreAndStart", "previous": JobState.INITIAL, "current": "Running"}
    return TraceEntry(TraceKind.STATE, job, scope, fields)


def step(job: str, name: str, active: bool = True) -> TraceEntry:
    return TraceEntry(TraceKind.STEP, job, SCOPE, {"step": name, "active": active})


def refused(job: str) -> TraceEntry:
    fields = {"method": "Clear", "status": "INVALID_JOB_ORDER_STATUS", "requested_by": "MES m"}
    return TraceEntry(TraceKind.METHOD, job, SCOPE, fields)


async def trace(bench: TraceBench, job: str) -> list[dict[str, Any]]:
    return await read_trace(bench.store, SCOPE, job)


async def test_a_flush_writes_one_stream_entry_per_job_read_back_as_its_happenings_in_order(
    trace_bench: TraceBench,
) -> None:
    writer = trace_bench.writer()
    writer.add(started("J1"))
    writer.add(started("J2"))
    command = {"correlation_id": "J1:tighten:1", "action": "tighten", "type": "t", "error": None}
    writer.add(TraceEntry(TraceKind.COMMAND, "J1", SCOPE, command, ts=100.0))
    writer.add(step("J2", "S1"))
    reply = {"correlation_id": "J1:tighten:1", "error": None, "data": {"nm": 85}}
    writer.add(TraceEntry(TraceKind.REPLY, "J1", None, reply, ts=100.25))  # scope: looked up
    writer.add(step("J1", "S1", active=False))
    await writer.flush()

    assert await trace_bench.commands("xadd") == 2
    assert await trace_bench.commands("evalsha") == 1  # both jobs' in one call: one scope
    assert await trace_bench.commands("pttl") == 0  # J1's scope was known from its entries
    one, two = await trace(trace_bench, "J1"), await trace(trace_bench, "J2")
    assert [e["kind"] for e in one] == ["state", "command", "reply", "step"]
    assert [e["kind"] for e in two] == ["state", "step"]
    stream_id = one[0]["id"].partition("/")[0]
    assert [e["id"] for e in one] == [f"{stream_id}/{n}" for n in range(4)]
    assert one[2]["latency_ms"] == 250.0
    assert one[2]["data"] == {"nm": 85}
    assert one[3]["active"] is False
    assert {e["instance"] for e in one} == {"i"}
    assert writer.written == 6

    writer.add(step("J1", "S2"))  # alone in its flush: an entry of its own, as it always was
    await writer.flush()
    raw = cast(list[Entry], await trace_bench.store.client.xrange(f"t:{{{SCOPE}}}:trace:J1"))
    assert raw[-1][1]["kind"] == "step"
    assert "fields" in raw[-1][1]
    newest = (await trace(trace_bench, "J1"))[-1]
    assert (newest["id"], newest["step"]) == (raw[-1][0], "S2")
    assert position(one[-1]["id"]) < position(newest["id"])


async def test_a_flush_of_many_jobs_goes_in_short_calls_and_a_failed_one_is_all_it_redoes(
    trace_bench: TraceBench, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Building one call (one pipeline before) of a few hundred jobs held the event loop for
    # tens of ms.
    writer = trace_bench.writer()
    jobs = [f"J{number}" for number in range(50)]
    per_job = 10  # 500 happenings: calls of 20 jobs
    for job in jobs:
        writer.add(started(job))
        for number in range(1, per_job):
            writer.add(step(job, f"S{number}"))
    with packets_sent() as sent:
        await writer.flush()
    calls = [packet for packet in sent if b"EVALSHA" in packet]
    jobs_per_call = HAPPENINGS_PER_WRITE // per_job
    assert [packet.count(b":trace:J") for packet in calls][-3:] == [jobs_per_call] * 2 + [10]
    assert await trace_bench.commands("evalsha") == 3  # (a NOSCRIPT one before, maybe)
    assert await trace_bench.commands("xadd") == len(jobs)

    call, attempts = TraceWriter._call, []

    async def second_fails(self: TraceWriter, *args: Any) -> None:
        attempts.append(1)
        if len(attempts) == 2:
            raise ConnectionError("Redis went away (test)")
        await call(self, *args)

    for job in jobs:
        for number in range(per_job):
            writer.add(step(job, f"T{number}"))
    monkeypatch.setattr(TraceWriter, "_call", second_fails)
    with pytest.raises(ConnectionError):
        await writer.flush()
    monkeypatch.undo()
    assert len(writer.queue) == (len(jobs) - jobs_per_call) * per_job  # the first call's went
    await writer.flush()
    for job in jobs:  # each step written once
        kinds = [entry["kind"] for entry in await trace(trace_bench, job)]
        assert kinds == ["state"] + ["step"] * (2 * per_job - 1)


async def test_refused_calls_are_kept_only_for_jobs_with_a_trace_without_a_check_per_entry(
    trace_bench: TraceBench,
) -> None:
    writer = trace_bench.writer()
    writer.add(started("J1"))
    for number in range(10):
        writer.add(step("J1", f"S{number}"))
    await writer.flush()
    assert await trace_bench.commands("exists") == 0  # the common case: no refused call

    writer.add(refused("J1"))
    writer.add(refused("nope"))  # a job the station does not hold: no trace made for it
    writer.add(refused("nope"))
    await writer.flush()
    assert await trace_bench.commands("exists") == 2  # one per job, in the flush's one call
    assert await trace_bench.commands("evalsha") == 2
    assert (await trace(trace_bench, "J1"))[-1]["status"] == "INVALID_JOB_ORDER_STATUS"
    assert await trace(trace_bench, "nope") == []

    writer.add(refused("J1"))  # with other happenings of the job: nothing to check
    writer.add(step("J1", "S10"))
    await writer.flush()
    assert await trace_bench.commands("exists") == 2


async def test_a_job_id_used_again_starts_a_fresh_trace(trace_bench: TraceBench) -> None:
    writer = trace_bench.writer()
    writer.add(started("J1"))
    writer.add(step("J1", "Old"))
    await writer.flush()
    writer.add(step("J1", "OldEnd"))
    writer.add(started("J1"))  # stored again in the same flush: the old trace goes
    writer.add(step("J1", "New"))
    await writer.flush()
    assert [e.get("step") for e in await trace(trace_bench, "J1")] == [None, "New"]


async def test_the_flush_interval_makes_one_write_per_job_of_what_came_meanwhile(
    trace_bench: TraceBench,
) -> None:
    interval = 0.2
    writer = trace_bench.writer(trace_flush_ms=int(interval * 1000))
    happenings = 2 * HAPPENINGS_PER_ENTRY  # a job's happenings of a flush fit one entry
    async with anyio.create_task_group() as tasks:
        await tasks.start(writer.run, trace_bench.gateway)
        began = anyio.current_time()
        for number in range(happenings):
            writer.add(step(f"J{number % 2}", f"S{number}"))
            await trace_bench.store.client.ping()  # a round trip: the writer could run
        await wait_until(lambda: writer.written == happenings)
        elapsed = anyio.current_time() - began
        trace_bench.gateway.stopping.set()
    # Flushes start at least ``interval`` apart, each with one XADD per job (2 jobs).
    assert await trace_bench.commands("xadd") <= 2 * (elapsed // interval + 1)
    for job, first in (("J0", 0), ("J1", 1)):
        steps = [e["step"] for e in await trace(trace_bench, job)]
        assert steps == [f"S{n}" for n in range(first, happenings, 2)]


async def test_a_trace_keeps_its_newest_max_entries_stream_entries(
    trace_bench: TraceBench,
) -> None:
    writer = trace_bench.writer(trace_max_entries=10)
    for flush in range(4):
        for number in range(5):
            writer.add(step("J1", f"S{flush}.{number}"))
        await writer.flush()
    steps = [e["step"] for e in await trace(trace_bench, "J1")]
    assert steps == [f"S{flush}.{number}" for flush in range(4) for number in range(5)]
    for number in range(30):  # one at a time: the newest 10 entries stay
        writer.add(step("J1", f"T{number}"))
        await writer.flush()
    assert [e["step"] for e in await trace(trace_bench, "J1")] == [f"T{n}" for n in range(20, 30)]


async def test_a_burst_for_one_job_is_split_into_entries_of_a_bounded_size(
    trace_bench: TraceBench,
) -> None:
    """A queue refilled after an outage may hold thousands of happenings of one job: one
    entry each would make a trace of ``trace_max_entries`` entries unbounded."""
    writer = trace_bench.writer(trace_max_entries=10)
    for number in range(HAPPENINGS_PER_ENTRY * 12):
        writer.add(step("J1", f"S{number}"))
    await writer.flush()
    raw = cast(list[Entry], await trace_bench.store.client.xrange(f"t:{{{SCOPE}}}:trace:J1"))
    assert len(raw) == 10
    steps = [e["step"] for e in await trace(trace_bench, "J1")]
    assert steps == [f"S{n}" for n in range(HAPPENINGS_PER_ENTRY * 2, HAPPENINGS_PER_ENTRY * 12)]


async def test_instances_writing_one_jobs_trace_keep_each_others_entries(
    trace_bench: TraceBench,
) -> None:
    """Replies reach any instance, so several write a job's trace: none may cut it by what it
    wrote itself (an instance writing a job for the first time cut it to one entry)."""
    first, second = trace_bench.writer(), trace_bench.writer()
    first.add(started("J1"))
    await first.flush()
    for number in range(3):
        first.add(step("J1", f"A{number}"))
        await first.flush()
    second.add(step("J1", "B0"))
    await second.flush()
    first.add(step("J1", "A3"))
    await first.flush()
    steps = [e.get("step") for e in await trace(trace_bench, "J1")]
    assert steps == [None, "A0", "A1", "A2", "B0", "A3"]


async def test_the_writer_keeps_nothing_of_the_jobs_it_wrote(trace_bench: TraceBench) -> None:
    """Its memory is its queue, however many jobs the station runs: nothing of a job is left
    on an instance when another ends it."""
    writer = trace_bench.writer()
    before = {name: _size(value) for name, value in vars(writer).items()}
    for job in range(200):
        writer.add(started(f"J{job}"))
        writer.add(step(f"J{job}", "S1"))
        reply = {"correlation_id": f"J{job}:a:1", "error": None, "data": None}
        writer.add(TraceEntry(TraceKind.REPLY, f"J{job}", None, reply))
    await writer.flush()
    assert writer.queue == deque()
    assert {name: _size(value) for name, value in vars(writer).items()} == before


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (dict, set, list, deque)) else None


class Interval:
    """The writer's flush interval as the test drives it: each wait is noted and lasts until
    the test ends it (``elapse``), or for ever."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._over = anyio.Event()

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self._over.wait()
        self._over = anyio.Event()

    def elapse(self) -> None:
        self._over.set()


async def test_stopping_writes_what_waits_for_the_interval(trace_bench: TraceBench) -> None:
    interval = Interval()
    writer = TraceWriter(
        UiSettings(trace_flush_ms=600_000), trace_bench.gateway, sleep=interval.sleep
    )
    async with anyio.create_task_group() as tasks:
        await tasks.start(writer.run, trace_bench.gateway)
        writer.add(step("J1", "S0"))
        await wait_until(lambda: interval.waits == [600.0])  # ten minutes, or the stop
        writer.add(step("J1", "S1"))
        writer.add(step("J1", "S2"))
        trace_bench.gateway.stopping.set()
    assert [e["step"] for e in await trace(trace_bench, "J1")] == ["S0", "S1", "S2"]
    assert await trace_bench.commands("evalsha") == 1


async def test_a_burst_after_a_quiet_spell_waits_the_interval_and_goes_in_one_write(
    trace_bench: TraceBench,
) -> None:
    """A step on a slow station: its reply, the step left, the next entered and its command
    come within a few ms of each other after a quiet second. The first of them once went at
    once and the others an interval later: two writes per step where one does."""
    interval = Interval()
    writer = TraceWriter(UiSettings(trace_flush_ms=50), trace_bench.gateway, sleep=interval.sleep)

    async def one_step(number: int) -> None:
        reply = {"correlation_id": f"J1:a{number}:1", "error": None, "data": None}
        writer.add(TraceEntry(TraceKind.REPLY, "J1", SCOPE, reply))
        await wait_until(lambda: len(interval.waits) == number + 1)  # the first waits
        writer.add(step("J1", f"S{number}", active=False))
        writer.add(step("J1", f"S{number + 1}"))
        assert writer.written == 3 * number  # nothing of this step written yet
        interval.elapse()
        await wait_until(lambda: writer.written == 3 * (number + 1))

    async with anyio.create_task_group() as tasks:
        await tasks.start(writer.run, trace_bench.gateway)
        for number in range(3):
            await one_step(number)
        trace_bench.gateway.stopping.set()
    assert interval.waits == [0.05] * 3
    assert await trace_bench.commands("evalsha") == 3  # one write per step
    assert await trace_bench.commands("xadd") == 3
    kinds = [e["kind"] for e in await trace(trace_bench, "J1")]
    assert kinds == ["reply", "step", "step"] * 3


def ended(job: str, scope: str = SCOPE) -> TraceEntry:
    fields = {"method": "Clear", "previous": "Ended.Completed", "current": JobState.END}
    return TraceEntry(TraceKind.STATE, job, scope, fields)


async def test_a_jobs_life_costs_one_call_per_flush_and_a_reply_finds_its_scope_by_its_trace(
    trace_bench: TraceBench,
) -> None:
    """Issue 37: what a job's trace needs besides its entries (starting afresh, the expiry)
    goes in the flush's one script call, not as commands of its own (DEL, HSET of a job ->
    scope map, EXPIRE, HDEL), and no key but the trace is kept. A reply whose equipment does
    not echo the scope goes to the known scope with the job's trace, a running job's before
    an ended one's."""
    client = trace_bench.store.client
    await client.sadd(trace_bench.store.keys.scopes(), "a-cell", SCOPE)
    writer = trace_bench.writer(trace_kept_seconds=300)
    writer.add(started("J1", "a-cell"))  # J1 of a-cell ended, its trace kept a while
    writer.add(ended("J1", "a-cell"))
    await writer.flush()
    await client.config_resetstat()
    reply = {"correlation_id": "J1:a:1", "error": None, "data": None}
    writer.add(started("J1"))
    with packets_sent() as sent:
        await writer.flush()  # stored: a fresh trace
        writer.add(TraceEntry(TraceKind.REPLY, "J1", None, reply))  # alone in its flush
        await writer.flush()
        writer.add(ended("J1"))
        await writer.flush()  # ended: the trace expires
        stray = {"correlation_id": "J9:a:1", "error": None, "data": None}
        writer.add(TraceEntry(TraceKind.REPLY, "J9", None, stray))  # no trace anywhere
        await writer.flush()
    names = [packet.split(b"\r\n")[2] for packet in sent]
    assert names.count(b"EVALSHA") == 3
    assert set(names) == {b"EVALSHA", b"SMEMBERS", b"PTTL"}  # (PTTL: the two lookups)
    assert writer.written == 2 + 4
    assert [e["kind"] for e in await trace(trace_bench, "J1")] == ["state", "reply", "state"]
    assert [e["current"] for e in await read_trace(trace_bench.store, "a-cell", "J1")] == [
        "Running",
        JobState.END,
    ]
    assert 0 < await client.ttl(f"t:{{{SCOPE}}}:trace:J1") <= 300
    assert await client.exists(f"t:{{{SCOPE}}}:trace:J9", "t:{a-cell}:trace:J9") == 0
    assert sorted(await client.keys("t:*")) == ["t:{_global}:scopes"] + [
        f"t:{{{scope}}}:trace:J1" for scope in ("a-cell", SCOPE)
    ]
    for command in ("del", "expire"):  # each once, inside the script
        assert await trace_bench.commands(command) == 1, command


async def test_a_store_outage_is_waited_out_logged_once_and_shown_on_readyz(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway_ui.trace_writer")
    server = redis_server(tmp_path).start()
    try:
        async with Redis(port=server.port, decode_responses=True) as client:
            readiness = Readiness()
            resilience = Resilience(readiness, minimum_seconds=0.01, maximum_seconds=0.1)
            store = SimpleNamespace(client=client, keys=KeySchema("t"))
            gateway = SimpleNamespace(
                store=store, resilience=resilience, instance_id="i", stopping=anyio.Event()
            )
            writer = TraceWriter(UiSettings(trace_buffer=100), gateway)
            async with anyio.create_task_group() as tasks:
                await tasks.start(writer.run, gateway)
                server.kill()
                for number in range(105):  # the buffer keeps the newest 100
                    writer.add(step("J1", f"S{number}"))
                await wait_until(lambda: "ui.trace" in readiness.failing)
                server.start()  # with its AOF: what was written before is there again
                await wait_until(lambda: readiness.ready and writer.written == 100, timeout=20)
                gateway.stopping.set()
            entries = await read_trace(cast(Any, store), SCOPE, "J1")
    finally:
        server.close()
    assert [entry["step"] for entry in entries] == [f"S{number}" for number in range(5, 105)]
    outages = [r for r in caplog.records if r.getMessage().startswith("ui.trace: ")]
    assert len(outages) == 2, [r.getMessage() for r in outages]  # its start and its end
    assert "back after" in outages[1].getMessage()
    dropped = [r for r in caplog.records if "dropped while Redis was away" in r.getMessage()]
    assert [r.getMessage() for r in dropped] == [
        "job trace: 5 entries were dropped while Redis was away"
    ]
