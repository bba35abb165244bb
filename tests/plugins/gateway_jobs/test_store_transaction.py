"""A Store decides inside its transaction: the configuration it checks is read with the job's
documents (one round trip, none when remembered) and guarded with them in the commit (a change
before the commit makes it decide again)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

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


async def test_a_store_reads_the_configuration_it_checks_once_and_guards_it_in_its_commit(
    jobs: LocalJobs, store: Store
) -> None:
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master("wm"))
    with packets_sent() as sent:
        stored = await JobsMethods(jobs.manager).call(
            SCOPE, JobMethod.STORE, {"JobOrder": job_order("J1")}
        )
    assert stored.ok, stored.message
    acceptance = jobs.manager.config.allowed_key(SCOPE, JOB_ACCEPTANCE).encode()
    reads = [packet for packet in sent if acceptance in packet and b"MGET" in packet]
    commits = [packet for packet in sent if acceptance in packet and b"EVAL" in packet]
    assert len(reads) == 1, sent
    assert b":job:J1" not in reads[0]  # a new job's keys are assumed free, as the guard checks
    assert len(commits) == 1, sent  # guarded in the commit, as a WATCH did

    # The next Store remembers the configuration: its commit is its only command.
    with packets_sent() as sent:
        stored = await JobsMethods(jobs.manager).call(
            SCOPE, JobMethod.STORE, {"JobOrder": job_order("J2")}
        )
    assert stored.ok, stored.message
    job_commands = [packet for packet in sent if b"discoveries" not in packet]
    if not isinstance(cast(object, store.client), RedisCluster):
        assert len(job_commands) == 1, job_commands
        assert b"EVALSHA" in job_commands[0]
    assert not any(b"MGET" in packet for packet in sent), sent


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
