"""A job page's event stream resumes after any trace cursor, inside an entry that holds several
happenings too, with neither duplicates nor gaps (real Redis, the writer's own entries)."""

from __future__ import annotations

import json
from contextlib import aclosing
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import anyio
import pytest

from gateway.testing import wait_until
from gateway_ui.app import resume_cursor
from gateway_ui.live import LiveFeed
from gateway_ui.sse import JobStream, parse_cursor
from gateway_ui.trace import TraceEntry, TraceKind, position, read_from, read_trace

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import TraceBench

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


def step(name: str) -> TraceEntry:
    return TraceEntry(TraceKind.STEP, "J1", SCOPE, {"step": name, "active": True})


async def no_live(scope: str, job: str) -> dict[str, Any]:
    return {}


def job_stream(bench: TraceBench, stopping: anyio.Event) -> JobStream:
    """A job page's stream through a feed of its own (its reader runs in ``feed_running``)."""
    data = SimpleNamespace(live=no_live)  # the job's present state: not what is tested here
    feed = LiveFeed(bench.store, bench.gateway.resilience, stopping, block_ms=100)
    return JobStream(cast(Any, data), bench.store, SCOPE, "J1", feed)


async def trace_events(
    stream: JobStream, cursor: list[str], until: str | int, received: list[tuple[str, str]]
) -> None:
    """Append (happening id, event id) of the trace events after ``cursor`` to ``received``,
    up to the happening ``until`` (or ``until`` of them)."""
    with anyio.fail_after(10):
        async with aclosing(stream.events(cursor)) as events:
            async for text in events:
                fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
                if fields.get("event") == "trace":
                    happening_id = json.loads(fields["data"])["id"]
                    received.append((happening_id, fields["id"]))
                    if happening_id == until or len(received) == until:
                        return


async def test_resuming_after_any_happening_gives_the_rest_exactly_once(
    trace_bench: TraceBench,
) -> None:
    writer = trace_bench.writer()
    names = [["A"], ["B0", "B1", "B2"], ["C"], ["D0", "D1"], ["E"]]  # one flush each
    for flush in names:
        for name in flush:
            writer.add(step(name))
        await writer.flush()
    trace = await read_trace(trace_bench.store, SCOPE, "J1")
    assert [entry["step"] for entry in trace] == [name for flush in names for name in flush]
    ids = [entry["id"] for entry in trace]
    assert sum("/" in happening_id for happening_id in ids) == 5  # B and D are batches
    assert ids == sorted(ids, key=position)

    stopping = anyio.Event()
    stream = job_stream(trace_bench, stopping)
    changes = "0-0"
    stream_ids = [happening_id.partition("/")[0] for happening_id in ids]
    # Every id the stream gives out, a plain stream id (a page's cursor) and the start.
    cursors = ["0-0", *ids[:-1], *sorted(set(stream_ids[:-1]), key=position)]
    for cursor in cursors:
        got: list[tuple[str, str]] = []
        await trace_events(stream, [changes, cursor], ids[-1], got)
        expected = [i for i in ids if position(i) > position(cursor)]
        assert [happening for happening, _ in got] == expected, cursor
        # Each event's id is where it leaves the browser: the happening it carried.
        assert [event_id for _, event_id in got] == [f"{changes},{i}" for i in expected]
    stopping.set()


async def test_a_stream_going_on_from_inside_a_batch_gets_what_comes_next_live(
    trace_bench: TraceBench,
) -> None:
    writer = trace_bench.writer()
    for name in ("B0", "B1", "B2"):
        writer.add(step(name))
    await writer.flush()
    batch = [entry["id"] for entry in await read_trace(trace_bench.store, SCOPE, "J1")]
    stopping = anyio.Event()
    got: list[tuple[str, str]] = []
    async with anyio.create_task_group() as tasks:
        stream = job_stream(trace_bench, stopping)
        await tasks.start(stream.feed.run)
        tasks.start_soon(trace_events, stream, ["0-0", batch[0]], 4, got)
        await wait_until(lambda: len(got) == 2)  # the rest of the batch: now it waits
        for name in ("C0", "C1"):
            writer.add(step(name))
        await writer.flush()
        await wait_until(lambda: len(got) == 4)
        stopping.set()
    trace = await read_trace(trace_bench.store, SCOPE, "J1")
    assert [happening for happening, _ in got] == [entry["id"] for entry in trace[1:]]
    assert [entry["step"] for entry in trace[1:]] == ["B1", "B2", "C0", "C1"]


def testresume_cursors_name_a_change_stream_id_and_a_trace_happening() -> None:
    assert parse_cursor("1-0,2-3/4", 2, trace_last=True) == ["1-0", "2-3/4"]
    assert parse_cursor("1-0,2-3", 2, trace_last=True) == ["1-0", "2-3"]
    assert parse_cursor("1-0/1,2-3", 2, trace_last=True) is None  # a change id has no part
    assert parse_cursor("1-0,2-3/4", 2) is None
    assert parse_cursor("1-0,2-3/x", 2, trace_last=True) is None
    assert parse_cursor("2-3/4", 1) is None
    assert read_from("5-2/1") == "5-1"
    assert read_from("5-0/1") == f"4-{(1 << 64) - 1}"
    assert read_from("5-0") == "5-0"
    request = SimpleNamespace(headers={"last-event-id": "1-0,2-3/4"}, query_params={})
    assert resume_cursor(cast(Any, request), 2, trace_last=True) == ["1-0", "2-3/4"]
