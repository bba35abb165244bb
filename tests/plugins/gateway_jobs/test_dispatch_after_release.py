"""The dispatch pass after a job frees its slot waits a little for another pass, which covers it.

Job management on the real Redis, its dispatcher serving passes as its service does; the wait
after a release is an injected pause that the test ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import anyio
import pytest

from gateway.jobmethods import JobMethod
from gateway.jobstates import TopState
from gateway.resilience import Readiness, Resilience
from gateway.testing import HeldPauses, poll_until, wait_until
from gateway_jobs.dispatcher import Dispatcher
from gateway_jobs.methods import JobsMethods
from gateway_jobs.testing import LocalJobs, job_order, work_master

if TYPE_CHECKING:
    from gateway.app import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


@pytest.fixture
async def serving(jobs: LocalJobs) -> AsyncIterator[Dispatcher]:
    """The dispatcher of ``jobs`` serving its passes (no periodic pass but the first)."""
    dispatcher = jobs.manager.dispatcher
    dispatcher.release_delay = 60.0
    # What ``serve`` uses of the gateway: its resilience (for the periodic pass).
    gateway = cast("Gateway", SimpleNamespace(resilience=Resilience(Readiness())))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(dispatcher.serve, gateway, 3600.0)
        await wait_until(lambda: dispatcher.passes.serving and dispatcher.passes.idle())
        yield dispatcher
        tasks.cancel_scope.cancel()


async def call(jobs: LocalJobs, method: JobMethod, **arguments: object) -> None:
    result = await JobsMethods(jobs.manager).call(SCOPE, method, arguments)
    assert result.ok, result.message


async def is_running(jobs: LocalJobs, job: str) -> bool:
    stored = await jobs.manager.repository.load(SCOPE, job)
    return stored is not None and stored.state.top is TopState.RUNNING


async def test_a_store_after_a_release_makes_the_one_pass(
    jobs: LocalJobs, serving: Dispatcher
) -> None:
    """An MES that aborts (or clears) a job and stores the next at once: one pass, the Store's."""
    pauses = HeldPauses()
    serving.sleep = pauses
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master())
    await call(jobs, JobMethod.STORE_AND_START, JobOrder=job_order("J1"))
    await poll_until(lambda: is_running(jobs, "J1"))
    passes = serving.passes.starts(SCOPE)

    await call(jobs, JobMethod.ABORT, JobOrderID="J1")  # frees its slot: a pass, later
    await wait_until(lambda: len(pauses.held) == 1)
    await call(jobs, JobMethod.STORE_AND_START, JobOrder=job_order("J2"))
    await poll_until(lambda: is_running(jobs, "J2"))
    pauses.end()
    await wait_until(serving.idle)
    assert serving.passes.starts(SCOPE) == passes + 1  # the Store's pass covered the release


async def test_a_release_nothing_follows_starts_the_waiting_job_after_the_pause(
    jobs: LocalJobs, serving: Dispatcher
) -> None:
    pauses = HeldPauses()
    serving.sleep = pauses
    serving.capacity = 1
    await jobs.manager.config.apply(SCOPE, "workmaster", "PUT", work_master())
    await call(jobs, JobMethod.STORE_AND_START, JobOrder=job_order("J1"))
    await poll_until(lambda: is_running(jobs, "J1"))
    await call(jobs, JobMethod.STORE_AND_START, JobOrder=job_order("J2"))  # waits for the slot
    await wait_until(serving.passes.idle)
    assert not await is_running(jobs, "J2")
    passes = serving.passes.starts(SCOPE)

    await call(jobs, JobMethod.ABORT, JobOrderID="J1")
    await wait_until(lambda: len(pauses.held) == 1)
    assert serving.passes.starts(SCOPE) == passes  # no pass yet
    pauses.end()
    await poll_until(lambda: is_running(jobs, "J2"))
    assert serving.passes.starts(SCOPE) == passes + 1
