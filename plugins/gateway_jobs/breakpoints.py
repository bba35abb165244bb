"""SetBreakpoint: a step a job (or every job of a Work Master) pauses before.

A project extension of the MES interface (OPC 40001-3 has no such method): the CloudEvent
``BREAKPOINT_TYPE`` on the commands topic, answered like the job methods with a ``ReturnStatus``;
``gateway jobs breakpoint`` and the web UI make the same call (``JobControl.set_breakpoint``).
Job management checks what it owns (the job exists and has not ended, the Work Master is
configured, the step is one of its recipe) and hands the breakpoint to the job's recipe
interpreter (``gateway.recipes.BreakpointControl``), which holds the job there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.controls import BreakpointControl
from gateway.errors import ValidationError
from gateway.jobstates import TopState
from gateway_jobs.jobs import JobManager
from gateway_jobs.model import Outcome, ReturnStatus

BREAKPOINT_TYPE = "io.github.station-gateway.jobs.SetBreakpoint.v1"
"""The CloudEvent type of the call and of its reply."""

BREAKPOINT_METHOD = "SetBreakpoint"  # as observers of ``gateway_job_method_called`` see it


async def set_breakpoint(
    manager: JobManager,
    scope: str,
    step: str,
    *,
    job_order_id: str | None,
    work_master_id: str | None,
    enabled: bool,
) -> Outcome:
    """Check, then set or clear the breakpoint with the recipe's interpreter."""
    if (job_order_id is None) == (work_master_id is None):
        raise ValidationError(
            "JobOrderID", "name a job (JobOrderID) or a Work Master (WorkMasterID)"
        )
    if job_order_id is not None:
        job = await manager.repository.load(scope, job_order_id)
        if job is None:
            return Outcome(
                ReturnStatus.UNKNOWN_JOB_ORDER_ID,
                f"unknown: no job order {job_order_id!r} in scope {scope!r}",
            )
        if job.state.final or job.state.top is TopState.END:
            return Outcome(
                ReturnStatus.INVALID_JOB_ORDER_STATUS,
                f"invalid-state: job {job_order_id} is {job.state.value}: it runs no more steps",
            )
        schema, recipe = job.recipe_schema, job.recipe
    else:
        work_master = await manager.config.work_master(scope, work_master_id or "")
        if work_master is None:
            return Outcome(
                ReturnStatus.INVALID_REQUEST,
                f"unknown-work-master: {work_master_id} is not configured",
            )
        schema, recipe = work_master.data_schema, work_master.data
    interpreter: object = manager.interpreters.get(schema or "")
    refusal = _step_refused(interpreter, recipe, step)
    if refusal is not None:
        return Outcome(ReturnStatus.INVALID_REQUEST, refusal)
    assert isinstance(interpreter, BreakpointControl)
    await interpreter.set_breakpoint(
        scope, step, job_order_id=job_order_id, work_master_id=work_master_id, enabled=enabled
    )
    return Outcome(ReturnStatus.NO_ERROR)


def _step_refused(interpreter: object, recipe: Any, step: str) -> str | None:
    if not isinstance(interpreter, BreakpointControl):
        return "unsupported: the recipe's interpreter has no breakpoints"
    try:
        steps = interpreter.breakpoint_steps(recipe)
    except ValidationError as error:
        return f"invalid-recipe: {error}"
    if step not in steps:
        return f"unknown-step: {step!r} is no step of the recipe (steps: {', '.join(steps)})"
    return None


def breakpoint_arguments(data: Any) -> tuple[str, str | None, str | None, bool]:
    """Step, JobOrderID, WorkMasterID and Enabled of a call's data (``ValidationError``)."""
    if not isinstance(data, Mapping):
        raise ValidationError("data", "must be a JSON object {Step, JobOrderID | WorkMasterID}")
    step = data.get("Step")
    if not isinstance(step, str) or not step:
        raise ValidationError("Step", "is required: the name of the step")
    job, work_master = data.get("JobOrderID"), data.get("WorkMasterID")
    for name, value in (("JobOrderID", job), ("WorkMasterID", work_master)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(name, "must be a string")
    enabled = data.get("Enabled", True)
    if not isinstance(enabled, bool):
        raise ValidationError("Enabled", "must be true (set) or false (clear)")
    return step, job, work_master, enabled
