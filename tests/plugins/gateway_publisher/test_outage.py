"""The MES is offline while 100 jobs complete; it comes back, sees the gap and loses no result.

Time-compressed version of the 30-minute outage: the MES's reading side disconnects, a line
controller starts 100 jobs at once (each completes at once: scripted recipe), the MES reconnects
with the seq and epoch it saw last, detects the gap from the retained state index, reads all 100
retained results, Clears each, and the index ends empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from gateway.jobstates import TopState
from gateway.store import Store
from gateway.testing import poll_until, running
from gateway_jobs.repository import JobRepository
from gateway_jobs.testing import JobsMes, job_order, return_status

if TYPE_CHECKING:
    from tests.plugins.gateway_publisher.conftest import Rig

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

JOBS = 100
OK = 1


async def start_jobs(line: JobsMes, count: int) -> None:
    """StoreAndStart ``count`` jobs as fast as the gateway takes them (10 in flight: more, and a
    loaded CI machine answered some after the MES's 5 s request timeout)."""
    slots = anyio.Semaphore(10)

    async def start(number: int) -> None:
        async with slots:
            reply = await line.store(job_order(f"JO-{number:03d}"), "StoreAndStart")
        assert return_status(reply) == OK

    async with anyio.create_task_group() as tasks:
        for number in range(count):
            tasks.start_soon(start, number)


async def all_ended(repository: JobRepository) -> bool:
    return len(await repository.in_state("cell1", TopState.ENDED)) == JOBS


async def caught_up(store: Store) -> bool:
    last = await store.client.xrevrange(store.keys.changes("cell1"), count=1) or []
    cursor = await store.client.get(store.keys.scoped("cell1", "publisher", "cursor"))
    return bool(last) and cursor == last[0][0]


async def test_mes_outage_with_100_completions(rig: Rig, store: Store) -> None:
    repository = JobRepository(store)
    jobs_gateway = rig.gateway("jobs", publisher=False)
    async with (
        running(jobs_gateway),
        running(rig.gateway("publisher", role="publisher")),
        rig.jobs_mes() as line,
    ):
        async with rig.mes() as mes:  # before the outage: one job, acknowledged
            await line.store(job_order("warm-up"), "StoreAndStart")
            await mes.follow(lambda index: bool(index.jobs) and index.jobs[0].has_result)
            assert (await mes.resync()).cleared == ["warm-up"]
            await mes.follow(lambda index: not index.jobs)
        seen = (mes.last_seq, mes.last_epoch)

        await start_jobs(line, JOBS)  # the MES is offline
        await poll_until(lambda: all_ended(repository), timeout=60)
        # Every change published and committed before the MES comes back: the publisher's
        # cursor at the stream's last record (job management ends a job before the publisher
        # has seen it: its count of records may lag the jobs' states).
        await poll_until(lambda: caught_up(store), timeout=60)

        async with rig.mes(last_seq=seen[0], last_epoch=seen[1]) as mes:
            report = await mes.resync()
            final = await mes.follow(lambda index: not index.jobs)
            leftovers = await mes.retained("result", ["never"], timeout=0.3)

    assert report.gap.kind == "missed"
    assert report.gap.missed > 0
    expected = {f"JO-{number:03d}" for number in range(JOBS)}
    assert report.results.keys() == expected  # every result, read from the retained topics
    assert sorted(report.cleared) == sorted(expected)
    for job_order_id, result in report.results.items():
        assert result["JobOrderID"] == job_order_id
        assert result["JobState"][0]["StateText"]["Text"] == "Ended"
        assert {entry["ID"] for entry in result["JobResponseData"]} == {
            "RecipeVersion",
            "WorkMasterID",
            "torque",
            "serial",
        }
    assert final[-1][0].jobs == ()
    # Followed live: after the retained index, no update is missed. Subscribing while the
    # publisher publishes may bring one update twice (its retained copy and the live message,
    # as any MQTT broker may): the MES recognises the second as stale and ignores it.
    assert {gap.kind for _, gap in final[1:]} <= {"none", "stale"}
    fresh = [index.seq for index, gap in final if gap.kind != "stale"]
    assert fresh == list(range(fresh[0], fresh[0] + len(fresh)))
    assert report.index is not None
    known = {*fresh, report.index.seq}
    assert all(index.seq in known for index, gap in final if gap.kind == "stale")
    assert leftovers == {}  # every result topic deleted
    assert await repository.count("cell1") == 0
