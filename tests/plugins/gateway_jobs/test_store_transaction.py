"""A Store decides inside its transaction: the configuration it checks is read with the job's
WATCH (one round trip) and watched with it (a change before the commit makes it decide again)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from gateway.jobmethods import JobMethod
from gateway.store import Store
from gateway.testing.redis_ha import packets_sent
from gateway_jobs.acceptance import Verdict
from gateway_jobs.config import JOB_ACCEPTANCE, ConfigSnapshot
from gateway_jobs.methods import JobsMethods
from gateway_jobs.model import JobOrder
from gateway_jobs.testing import LocalJobs, job_order, local_jobs, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


async def test_a_store_reads_the_configuration_it_checks_in_the_round_trip_of_its_watch(
    jobs: LocalJobs, store: Store
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm"))
    with packets_sent() as sent:
        stored = await JobsMethods(jobs.manager).call(
            SCOPE, JobMethod.STORE, {"JobOrder": job_order("J1")}
        )
    assert stored.ok, stored.message
    acceptance = jobs.manager.config.allowed_key(SCOPE, JOB_ACCEPTANCE).encode()
    reads = [packet for packet in sent if acceptance in packet]
    client: object = store.client  # a RedisCluster on a Cluster, whatever it is typed as
    if isinstance(client, RedisCluster):
        # A Cluster pipeline sends its WATCH alone: the configuration is watched with the job.
        assert any(b"WATCH" in packet and acceptance in packet for packet in sent), sent
        return
    assert len(reads) == 1, reads  # no read of its own before the transaction
    assert b"WATCH" in reads[0], reads
    assert b"MGET" in reads[0], reads


async def test_a_work_master_changed_while_a_store_decides_is_decided_on_again(
    jobs: LocalJobs, store_factory: Callable[[], Store]
) -> None:
    config = jobs.manager.config
    await config.apply(SCOPE, "workmaster", "PUT", work_master("wm", {"run": True}))
    changed = work_master("wm", {"run": True, "complete": {"torque": 42.5}})
    check = jobs.manager._check
    checked: list[Any] = []

    async def check_while_changed(scope: str, order: JobOrder, known: ConfigSnapshot) -> Verdict:
        if not checked:  # another instance replaces the Work Master meanwhile
            async with store_factory() as other:
                await local_jobs(other).manager.config.apply(scope, "workmaster", "PUT", changed)
        checked.append(known.work_masters["wm"])
        return await check(scope, order, known)

    jobs.manager._check = check_while_changed  # type: ignore[method-assign]
    stored = await JobsMethods(jobs.manager).call(
        SCOPE, JobMethod.STORE, {"JobOrder": job_order("J1")}
    )
    assert stored.ok, stored.message
    assert len(checked) == 2  # decided again on the Work Master as it is now
    job = await jobs.manager.repository.load(SCOPE, "J1")
    assert job is not None
    assert job.work_master.data == changed["Data"]
