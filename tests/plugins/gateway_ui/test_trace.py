"""The job trace writer on a Redis server of its own, which the test kills and restarts."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import anyio
import pytest
from redis.asyncio import Redis

from gateway.resilience import Readiness, Resilience
from gateway.store import KeySchema
from gateway.testing import wait_until
from gateway.testing.services import redis_server
from gateway_ui.settings import UiSettings
from gateway_ui.trace import TraceEntry, TraceKind, TraceWriter

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

Entry = tuple[str, dict[str, str]]


async def test_a_store_outage_is_waited_out_logged_once_and_shown_on_readyz(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway_ui.trace")
    server = redis_server(tmp_path).start()
    try:
        async with Redis(port=server.port, decode_responses=True) as client:
            readiness = Readiness()
            resilience = Resilience(readiness, minimum_seconds=0.01, maximum_seconds=0.1)
            store = SimpleNamespace(client=client, keys=KeySchema("t"))
            gateway = SimpleNamespace(
                store=store, resilience=resilience, instance_id="i", stopping=anyio.Event()
            )
            writer = TraceWriter(UiSettings(), gateway)
            async with anyio.create_task_group() as tasks:
                await tasks.start(writer.run, gateway)
                server.kill()
                for number in range(5):
                    fields = {"step": f"S{number}", "active": True}
                    writer.add(TraceEntry(TraceKind.STEP, "J1", "cell1", fields))
                await wait_until(lambda: "ui.trace" in readiness.failing)
                server.start()  # with its AOF: what was written before is there again
                await wait_until(lambda: readiness.ready and writer.written == 5, timeout=20)
                gateway.stopping.set()
            entries = cast(list[Entry], await client.xrange("t:{cell1}:trace:J1"))
    finally:
        server.close()
    assert [entry[1]["kind"] for entry in entries] == ["step"] * 5
    outages = [r for r in caplog.records if r.getMessage().startswith("ui.trace: ")]
    assert len(outages) == 2, [r.getMessage() for r in outages]  # its start and its end
    assert "back after" in outages[1].getMessage()
