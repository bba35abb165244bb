"""The pages' shared reader is paced: a busy spell's entries come with one read (real Redis)."""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from gateway.changes import ReadPace
from gateway.testing import HeldPauses, wait_until
from gateway_ui.live import LiveFeed

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import TraceBench

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_entries_written_while_the_reader_pauses_come_with_one_read(
    trace_bench: TraceBench, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = trace_bench.store
    stream = store.keys.changes("cell1")
    read, reads = store.read_streams, 0

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(*args, **kwargs)

    monkeypatch.setattr(store, "read_streams", counted)
    pauses = HeldPauses()
    stopping = anyio.Event()
    feed = LiveFeed(store, trace_bench.gateway.resilience, stopping, block_ms=100)
    feed.pace = ReadPace(60.0, clock=lambda: 0.0, sleep=pauses)
    received: list[str] = []

    async def follow() -> None:
        async with aclosing(feed.follow({stream: "0-0"})) as batches:
            async for batch in batches:
                for _, entries in batch or []:
                    received.extend(fields["n"] for _, fields in entries)

    async with anyio.create_task_group() as tasks:
        await tasks.start(feed.run)
        tasks.start_soon(follow)
        await wait_until(lambda: feed.followed == 1)
        await store.client.xadd(stream, {"n": "0"})
        await wait_until(lambda: received == ["0"])
        await wait_until(lambda: len(pauses.held) == 1)  # it would wait 60 s for more
        before = reads
        for number in range(1, 4):
            await store.client.xadd(stream, {"n": str(number)})
        pauses.end()
        await wait_until(lambda: len(received) == 4)
        await wait_until(lambda: len(pauses.held) == 2)  # pausing again: no read meanwhile
        assert reads - before == 1
        stopping.set()
        pauses.end()
        tasks.cancel_scope.cancel()
    assert received == ["0", "1", "2", "3"]
