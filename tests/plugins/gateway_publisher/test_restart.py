"""Restarts and replicas in-process: cursors resume exactly, seq grows, epochs change, one leads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from redis.exceptions import RedisError

from gateway.store import Store
from gateway.testing import running, wait_until
from gateway.testing.mes import StateIndex
from gateway_jobs.testing import job_order
from gateway_publisher.batch import Batch

if TYPE_CHECKING:
    from tests.plugins.gateway_publisher.conftest import Rig

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_restart_resumes_at_the_cursor_with_a_new_epoch(rig: Rig) -> None:
    jobs_gateway = rig.gateway("jobs", publisher=False)
    async with running(jobs_gateway), rig.jobs_mes() as jobs, rig.mes() as mes:
        async with running(rig.gateway("p", role="publisher")):
            for number in range(3):
                await jobs.store(job_order(f"j{number}"))
            first = (await mes.follow(lambda index: len(index.jobs) == 3))[-1][0]
            before = rig.service
        await jobs.store(job_order("j3"))  # while no publisher runs
        await jobs.act("Cancel", "j0")
        async with running(rig.gateway("p", role="publisher")):
            seen = await mes.follow(lambda index: index.job("j3") is not None)
            after = rig.service
            await wait_until(lambda: after.stats.records == 2)
    assert before.stats.records == 3
    restarted = [(index, gap) for index, gap in seen if index.epoch != first.epoch]
    assert restarted[0][1].kind == "restart"  # the index republished at start, new epoch
    assert [gap.kind for _, gap in restarted[1:]] == ["none"] * (len(restarted) - 1)
    seqs = [index.seq for index, _ in seen]
    assert seqs == sorted(set(seqs))
    assert restarted[0][0].seq > first.seq
    assert [job.job_order_id for job in seen[-1][0].jobs] == ["j1", "j2", "j3"]
    assert after.stats.records == 2  # only what was written while it was down: no replay


async def test_one_publisher_leads_and_a_standby_takes_over(rig: Rig) -> None:
    # A lease of 1 s: the standby looks for it every 0.25 s.
    a = rig.gateway("a", role="publisher", GATEWAY_PUBLISHER_LEASE_SECONDS="1")
    b = rig.gateway("b", role="publisher", GATEWAY_PUBLISHER_LEASE_SECONDS="1")
    services = [rig.publishers[0].services[0], rig.publishers[1].services[0]]
    jobs_gateway = rig.gateway("jobs", publisher=False)
    async with running(jobs_gateway), rig.jobs_mes() as jobs, rig.mes() as mes, running(a):
        await wait_until(lambda: services[0].term is not None)
        async with running(b):
            await jobs.store(job_order("j1"))
            first = (await mes.follow(lambda index: bool(index.jobs)))[-1][0]
            assert services[1].term is None  # standby
            a.request_stop("handing over")
            await wait_until(lambda: services[1].term is not None)
            await jobs.store(job_order("j2"))
            seen = await mes.follow(lambda index: len(index.jobs) == 2)
    index = seen[-1][0]
    assert index.epoch != first.epoch
    assert index.seq > first.seq
    assert services[0].stats.records == 1
    assert services[1].stats.records == 1


async def test_a_batch_whose_commit_failed_is_published_again(rig: Rig, store: Store) -> None:
    """At least once: the retry republishes the same content under a higher seq."""
    async with running(rig.gateway()), rig.jobs_mes() as jobs, rig.mes() as mes:
        await wait_until(lambda: rig.service.term is not None)
        term = rig.service.term
        assert term is not None
        commit, failed = term.persisted.commit, list[str | None]()

        async def commit_failing_once(batch: Batch, reserve: int = 0) -> None:
            if not failed:
                failed.append(batch.last_id)
                raise RedisError("injected: the commit's reply was lost")
            await commit(batch, reserve)

        term.persisted.commit = commit_failing_once  # type: ignore[method-assign]
        await jobs.store(job_order("j1"))
        with_j1: list[StateIndex] = []

        def twice(index: StateIndex) -> bool:
            if index.job("j1"):
                with_j1.append(index)
            return len(with_j1) == 2  # published, the commit failed, published again

        await mes.follow(twice)
        await wait_until(lambda: rig.service.stats.records == 1)
    assert with_j1[-1].seq > with_j1[0].seq
    assert with_j1[-1].jobs == with_j1[0].jobs
    assert rig.service.stats.records == 1  # committed once
    cursor_key = store.keys.scoped("cell1", "publisher", "cursor")
    assert await store.client.get(cursor_key) == failed[0]
