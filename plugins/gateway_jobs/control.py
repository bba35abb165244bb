"""``gateway.recipes.JobControl``: how a recipe interpreter reports on its job.

Every call is a compare-and-swap on the stored state (``JobManager.drive``): ``False``, and
nothing changed, when the job is not where the call expects it. Results become the Job
Response's ``JobResponseData`` (``ISA95ParameterDataType`` entries, replaced by ``ID``). A
failure (``abort``) adds two reserved entries, ``Error`` (the error text) and ``SideEffects``
(whether a command that may have changed product or equipment had been sent), and says the
error in the response's ``Description``; ``hold`` says its reason there too.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.changes import Trigger
from gateway.cloudevents import format_time, utc_now
from gateway.controls import StepEdit
from gateway.jobstates import JobState
from gateway.logs import log_context
from gateway.recipes import (
    RECIPE_VERSION_ID,
    Acknowledgement,
    JobCommand,
    JobOutcome,
    JobSummary,
    ProcessValue,
    RecipeJob,
    RequestOutcome,
    ScopeQueue,
)
from gateway_jobs.breakpoints import BREAKPOINT_METHOD, set_breakpoint
from gateway_jobs.editing import EDIT_METHOD, edit_steps, traced
from gateway_jobs.events import Cause
from gateway_jobs.jobs import JobManager, results_received
from gateway_jobs.model import (
    EUInformation,
    JobOrderIDCall,
    LocalizedText,
    Outcome,
    Parameter,
    ReturnStatus,
    to_json,
)
from gateway_jobs.repository import Edit
from gateway_jobs.stored import StoredJob

log = logging.getLogger(__name__)

ERROR_ID = "Error"
SIDE_EFFECTS_ID = "SideEffects"
# Job Response entry of a job that failed unsafe: who acknowledged it, when, what was released.
ACKNOWLEDGED_ID = "Acknowledged"
# As observers of ``gateway_job_method_called`` (the failed job's trace) see an acknowledgement.
ACKNOWLEDGE_METHOD = "Acknowledge"


class JobsControl:
    """The job control of the jobs plugin (``gateway.job_control``)."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager

    async def job(self, scope: str, job_order_id: str) -> RecipeJob | None:
        job = await self.manager.repository.load(scope, job_order_id)
        return None if job is None else job.recipe_job(scope)

    async def state(self, scope: str, job_order_id: str) -> JobState | None:
        job = await self.manager.repository.load(scope, job_order_id)
        return None if job is None else job.state

    async def startable(self, scope: str) -> Sequence[str]:
        # Only the jobs the dispatcher let start: the others wait in the queue for their turn.
        return await self.manager.dispatcher.admitted_waiting(scope)

    async def queue(self, scope: str) -> ScopeQueue:
        return (await self.manager.dispatcher.queue(scope)).public()

    async def jobs(self, scope: str) -> Sequence[JobSummary]:
        repository = self.manager.repository
        summaries = []
        for job_order_id in await repository.job_order_ids(scope):
            job = await repository.load(scope, job_order_id)
            if job is not None:  # cleared meanwhile
                summaries.append(summary(job))
        return summaries

    async def summary(self, scope: str, job_order_id: str) -> JobSummary | None:
        job = await self.manager.repository.load(scope, job_order_id)
        return None if job is None else summary(job)

    async def response(self, scope: str, job_order_id: str) -> Mapping[str, Any] | None:
        job = await self.manager.repository.load(scope, job_order_id)
        return None if job is None else dict(to_json(job.response))

    async def request(
        self,
        scope: str,
        job_order_id: str,
        command: JobCommand,
        requested_by: str,
        *,
        reason: str | None = None,
    ) -> RequestOutcome:
        cause = Cause(correlationid=None, causationid=f"operator-{uuid.uuid4()}")
        call = JobOrderIDCall(job_order_id=job_order_id)
        described = None if reason is None else _response_edit([], description=reason)
        outcome = await self.manager.act(scope, command.value, call, cause, described)
        self.manager.method_called(
            scope, job_order_id, command.value, outcome, requested_by=requested_by
        )
        return RequestOutcome(outcome.ok, outcome.status.name, outcome.message)

    async def set_breakpoint(
        self,
        scope: str,
        step: str,
        *,
        job_order_id: str | None = None,
        work_master_id: str | None = None,
        enabled: bool = True,
        requested_by: str,
    ) -> RequestOutcome:
        outcome = await set_breakpoint(
            self.manager,
            scope,
            step,
            job_order_id=job_order_id,
            work_master_id=work_master_id,
            enabled=enabled,
        )
        self.manager.method_called(
            scope, job_order_id, BREAKPOINT_METHOD, outcome, requested_by=requested_by
        )
        return RequestOutcome(outcome.ok, outcome.status.name, outcome.message)

    async def edit_steps(
        self,
        scope: str,
        job_order_id: str,
        edit: StepEdit,
        *,
        expected: str | None = None,
        requested_by: str,
    ) -> RequestOutcome:
        cause = Cause(correlationid=None, causationid=f"operator-{uuid.uuid4()}")
        outcome = await edit_steps(
            self.manager, scope, job_order_id, edit, expected=expected, cause=cause
        )
        self.manager.method_called(
            scope, job_order_id, EDIT_METHOD, traced(edit, outcome), requested_by=requested_by
        )
        return RequestOutcome(outcome.ok, outcome.status.name, outcome.message)

    async def run(self, scope: str, job_order_id: str) -> bool:
        return await self.manager.drive(scope, job_order_id, Trigger.RUN)

    async def complete(
        self, scope: str, job_order_id: str, outcome: JobOutcome, *, run: str | None = None
    ) -> bool:
        edit = _response_edit(outcome.results, description=None)  # no Held note remains
        return await self.manager.drive(scope, job_order_id, Trigger.COMPLETE, edit, run=run)

    async def abort(
        self, scope: str, job_order_id: str, outcome: JobOutcome, *, run: str | None = None
    ) -> bool:
        error = outcome.error or "the recipe failed"
        failure = [
            ProcessValue(ERROR_ID, error),
            ProcessValue(SIDE_EFFECTS_ID, outcome.side_effects),
        ]
        edit = _response_edit([*outcome.results, *failure], description=f"Aborted: {error}")
        failed = await self.manager.drive(scope, job_order_id, Trigger.FAIL, edit, run=run)
        if failed:
            # Why a job failed belongs in the log, not only in its Job Response.
            with log_context(scope=scope, job=job_order_id, correlationid=outcome.correlation_id):
                log.warning("job %s/%s aborted: %s", scope, job_order_id, error)
        return failed

    async def hold(
        self, scope: str, job_order_id: str, reason: str, *, run: str | None = None
    ) -> bool:
        edit = _response_edit([], description=f"Held: {reason}")
        return await self.manager.drive(scope, job_order_id, Trigger.HOLD, edit, run=run)

    async def block(
        self, scope: str, job_order_id: str, equipment: Sequence[str], reason: str
    ) -> bool:
        if not self.manager.settings.block_unsafe_failures:
            return False
        await self.manager.dispatcher.block(scope, job_order_id, equipment, reason)
        with log_context(scope=scope, job=job_order_id):
            log.warning(
                "job %s/%s failed unsafe: %s blocked until acknowledged (%s)",
                scope,
                job_order_id,
                ", ".join(sorted(set(equipment))),
                reason,
            )
        return True

    async def release(self, scope: str, job_order_id: str) -> None:
        released = await self.manager.dispatcher.acknowledge(scope, None, blocked_by=job_order_id)
        if released:
            log.info(
                "job %s/%s rolled back safely: %s released",
                scope,
                job_order_id,
                ", ".join(sorted(released)),
            )

    async def acknowledge(
        self, scope: str, equipment: Sequence[str] | None, acknowledged_by: str
    ) -> Sequence[Acknowledgement]:
        released = await self.manager.dispatcher.acknowledge(scope, equipment)
        by_job: dict[str, list[str]] = {}
        for name, blocked in sorted(released.items()):
            by_job.setdefault(blocked.job_order_id, []).append(name)
        for job_order_id, names in by_job.items():
            # Traced where the failure is, with who acknowledged: in the failed job's Job
            # Response (if it is still there), its trace (the web UI's) and the log.
            with log_context(scope=scope, job=job_order_id):
                log.warning(
                    "%s acknowledged the unsafe failure of job %s/%s: %s released",
                    acknowledged_by,
                    scope,
                    job_order_id,
                    ", ".join(names),
                )
            entry = {"By": acknowledged_by, "At": utc_text(), "Equipment": names}
            recorded = ProcessValue(ACKNOWLEDGED_ID, entry)
            if not await self.record_results(scope, job_order_id, [recorded]):
                continue  # the job was cleared: its trace goes (or went) with it
            released_text = Outcome(ReturnStatus.NO_ERROR, f"released {', '.join(names)}")
            self.manager.method_called(
                scope, job_order_id, ACKNOWLEDGE_METHOD, released_text, requested_by=acknowledged_by
            )
        return [
            Acknowledgement(name, blocked.job_order_id, blocked.reason)
            for name, blocked in sorted(released.items())
        ]

    async def record_results(
        self,
        scope: str,
        job_order_id: str,
        results: Sequence[ProcessValue],
        *,
        run: str | None = None,
    ) -> bool:
        """Allowed while the job runs or is interrupted, and after it ended or aborted (the
        results an interpreter collects up to a Stop or Abort from the MES)."""
        edit = _response_edit(results)

        def recorded(job: StoredJob) -> StoredJob:
            return results_received(edit(job))

        return await self.manager.drive(
            scope, job_order_id, Trigger.RESULT_UPDATE, recorded, run=run
        )


def utc_text() -> str:
    return format_time(utc_now())


def summary(job: StoredJob) -> JobSummary:
    version = next(
        (
            entry.value
            for entry in job.response.job_response_data or []
            if entry.id == RECIPE_VERSION_ID
        ),
        None,
    )
    return JobSummary(
        job_order_id=job.job_order_id,
        state=job.state,
        priority=job.priority,
        stored_at=job.stored_at,
        start_time=job.response.start_time,
        end_time=job.response.end_time,
        work_master_id=job.work_master_id,
        recipe_version=version if isinstance(version, str) else None,
    )


def _response_edit(results: Sequence[ProcessValue], **description: str | None) -> Edit:
    """An edit of the Job Response: ``results`` merged into its data (same ``ID``: the newer
    wins) and, when given, its ``description`` replaced (``None`` removes it)."""

    def edit(job: StoredJob) -> StoredJob:
        merged = {entry.id: entry for entry in job.response.job_response_data or []}
        merged.update((value.id, parameter(value)) for value in results)
        changes: dict[str, Any] = {"job_response_data": list(merged.values()) or None}
        if "description" in description:
            text = description["description"]
            changes["description"] = None if text is None else LocalizedText("en", text)
        return dataclasses.replace(job, response=dataclasses.replace(job.response, **changes))

    return edit


def parameter(value: ProcessValue) -> Parameter:
    """A process value as an ``ISA95ParameterDataType`` entry."""
    return Parameter(
        id=value.id,
        value=_storable(value.value),
        description=[LocalizedText("en", value.description)] if value.description else None,
        engineering_units=(
            EUInformation(display_name=LocalizedText("en", value.unit)) if value.unit else None
        ),
    )


def _storable(value: Any) -> Any:
    """Values JSON cannot carry (NaN, bytes, timestamps...) are kept as their text."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _storable(item) for key, item in value.items()}
    return str(value)
