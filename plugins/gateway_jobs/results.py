"""The service that makes Job Responses final whose recipe results did not come in time.

When the MES stops or aborts a job its recipe ran, the job ends at once, and its Job Response
becomes final (``has_result``) once the recipe has recorded the results it collected
(``JobControl.record_results``). A recipe that never reports (its instance gone, its state lost)
holds it back at most ``jobs.results_wait_seconds``: every instance looks for such jobs each
``jobs.dispatch_poll_seconds`` and releases them without the results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from gateway_jobs.jobs import JobManager
from gateway_jobs.roles import JOB_CHANGING_ROLES

if TYPE_CHECKING:
    from gateway.app import Gateway


class ResultsDueService:
    name = "jobs-results-due"
    roles = JOB_CHANGING_ROLES

    def __init__(self, manager: JobManager, poll_seconds: float) -> None:
        self.manager = manager
        self.poll_seconds = poll_seconds

    async def release(self) -> None:
        for scope in sorted(await self.manager.repository.store.known_scopes()):
            await self.manager.release_overdue_results(scope)

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(
                gateway.resilience.every, "jobs.results", self.poll_seconds, self.release
            )
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()
