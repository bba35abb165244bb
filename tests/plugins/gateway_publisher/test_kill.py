"""The publisher process is SIGKILLed while jobs stream through, and restarted.

Jobs keep completing (job management runs in this process, the publisher in its own); an MES
client records every state index it receives. Across the kill the sequence numbers only grow,
the epoch changes once, and after the restart the index and the retained results account for
every job: the records written while the publisher was dead, and the batch it may have been
publishing when it died, are published from the persisted cursor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from gateway.testing import running, wait_until
from gateway.testing.mes import Gap, StateIndex
from gateway.testing.processes import GatewayProcess
from gateway_jobs.testing import JobsMes, job_order, return_status

if TYPE_CHECKING:
    from tests.plugins.gateway_publisher.conftest import Rig

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

NODE = Path(__file__).with_name("publisher_node.py")
JOBS = 60


@pytest.fixture
def publisher(rig: Rig, tmp_path: Path) -> Iterator[GatewayProcess]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    environ = {**inherited, **rig.environ("publisher", "publisher")}
    # Each term of the lease logs its epoch once: "active" once per start.
    process = GatewayProcess(NODE, environ, tmp_path / "publisher.log", "MES publisher active")
    try:
        yield process
    finally:
        process.stop()


async def start_jobs(line: JobsMes, numbers: range) -> None:
    async with anyio.create_task_group() as tasks:
        for number in numbers:
            tasks.start_soon(start_job, line, number)


async def start_job(line: JobsMes, number: int) -> None:
    # A burst of 50 concurrent calls on a loaded 2-core machine: the reply may take longer than
    # the default 5 s; what this test checks is the publisher, not the reply time.
    reply = await line.store(job_order(f"K{number:02d}"), "StoreAndStart", timeout=30)
    assert return_status(reply) == 1


async def test_sigkill_mid_stream_loses_no_update(rig: Rig, publisher: GatewayProcess) -> None:
    seen: list[tuple[StateIndex, Gap]] = []
    finished = {f"K{number:02d}" for number in range(JOBS)}

    latest: list[StateIndex] = []

    def all_published(index: StateIndex) -> bool:
        return {job.job_order_id for job in index.jobs if job.has_result} == finished

    def published(count: int) -> bool:
        return bool(latest) and sum(job.has_result for job in latest[-1].jobs) >= count

    def progress(index: StateIndex) -> bool:
        latest.append(index)
        return all_published(index)

    jobs_gateway = rig.gateway("jobs", publisher=False)
    async with running(jobs_gateway), rig.jobs_mes() as line, rig.mes() as mes:
        async with anyio.create_task_group() as tasks:

            async def follow() -> None:
                seen.extend(await mes.follow(progress, timeout=30))

            tasks.start_soon(follow)
            publisher.start()
            await wait_until(publisher.ready, timeout=10)
            await start_jobs(line, range(10))
            await wait_until(lambda: published(10), timeout=5)
            # A burst, and the kill while the publisher is working through it.
            tasks.start_soon(start_jobs, line, range(10, JOBS))
            await wait_until(lambda: published(12), timeout=5)
            publisher.kill()
            publisher.start()  # jobs keep completing while it starts again
        results = await mes.retained("result", finished, timeout=5)

    indexes = [index for index, _ in seen]
    seqs = [index.seq for index in indexes]
    assert seqs == sorted(set(seqs)), "seq went backwards or repeated"
    epochs = list(dict.fromkeys(index.epoch for index in indexes))
    assert len(epochs) == 2, "one epoch before the kill, another after"
    assert [gap.kind for _, gap in seen].count("restart") == 1
    assert all_published(indexes[-1])
    assert {job.state for job in indexes[-1].jobs} == {("Ended", "Completed")}
    assert results.keys() == finished
