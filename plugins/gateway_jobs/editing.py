"""EditSteps: add, insert, replace, delete or reset the steps a job has not begun.

A project extension of the MES interface (OPC 40001-3's Update replaces a whole job order, and
only before it starts): the CloudEvent ``EDIT_TYPE`` on the commands topic, answered with a
``ReturnStatus`` and the job's new ``RecipeVersion``; ``gateway jobs edit`` and the web UI make
the same call (``JobControl.edit_steps``).

Where the edit is made depends on who holds the job's recipe:

- a job not started (NotAllowedToStart, AllowedToStart) runs the recipe of the Work Master kept
  in its document: the edit changes it there, in the compare-and-swap of an ``Update``
  transition (status event ``Update``), computed from the document as it is in that swap;
- a job whose recipe runs: its interpreter edits what it runs, atomically with its execution
  state (``gateway.recipes.StepEditor.edit_running``), and the job's document then records the
  new recipe (a ``ResultUpdate``: no state change, no status event).

Either way the Job Response's ``RecipeVersion`` becomes the edited recipe's, so a result says
which program made it, and observers of ``gateway_job_method_called`` (the operator's trace)
see the ``EditSteps`` call and who made it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import anyio

from gateway.changes import Trigger
from gateway.controls import EditOp, StepEdit, StepEditor
from gateway.errors import ValidationError
from gateway.jobstates import TopState
from gateway.recipes import RECIPE_VERSION_ID, recipe_version
from gateway.resilience import TransientError
from gateway_jobs.events import Cause
from gateway_jobs.jobs import JobManager
from gateway_jobs.model import Outcome, Parameter, ReturnStatus
from gateway_jobs.stored import StoredJob

EDIT_TYPE = "io.github.station-gateway.jobs.EditSteps.v1"
"""The CloudEvent type of the call and of its reply."""

EDIT_METHOD = "EditSteps"  # as observers of ``gateway_job_method_called`` see it
_PREPARED = (TopState.NOT_ALLOWED_TO_START, TopState.ALLOWED_TO_START)
# How long an edit of a job paused before its first step waits, each time, for a start under
# way (its Resume) to create the state it then edits too.
STARTING_PAUSES = (0.02, 0.05, 0.1, 0.2, 0.5)


class _Changed(Exception):
    """The recipe changed between the look and the swap: the edit is made again."""


async def edit_steps(
    manager: JobManager,
    scope: str,
    job_order_id: str,
    edit: StepEdit,
    *,
    expected: str | None,
    cause: Cause,
) -> Outcome:
    """Check, then edit; the outcome's message is the new recipe version when accepted."""
    for _ in range(5):
        job = await manager.repository.load(scope, job_order_id)
        if job is None:
            message = f"unknown: no job order {job_order_id!r} in scope {scope!r}"
            return Outcome(ReturnStatus.UNKNOWN_JOB_ORDER_ID, message)
        if job.state.final or job.state.top is TopState.END:
            return Outcome(
                ReturnStatus.INVALID_JOB_ORDER_STATUS,
                f"invalid-state: job {job_order_id} is {job.state.value}: no step is left to edit",
            )
        interpreter: object = manager.interpreters.get(job.recipe_schema or "")
        if not isinstance(interpreter, StepEditor):
            return Outcome(
                ReturnStatus.INVALID_REQUEST,
                "unsupported: the recipe's interpreter cannot edit steps",
            )
        try:
            if job.state.top in _PREPARED:
                return await _edit_stored(manager, scope, job, interpreter, edit, expected, cause)
            return await _edit_running(manager, scope, job, interpreter, edit, expected)
        except _Changed:
            continue
        except ValidationError as error:
            return Outcome(ReturnStatus.INVALID_REQUEST, str(error))
        except TransientError as error:
            return Outcome(ReturnStatus.INVALID_JOB_ORDER_STATUS, f"busy: {error}")
    return Outcome(ReturnStatus.INVALID_JOB_ORDER_STATUS, "busy: the job kept changing")


async def _edit_stored(
    manager: JobManager,
    scope: str,
    job: StoredJob,
    interpreter: StepEditor,
    edit: StepEdit,
    expected: str | None,
    cause: Cause,
) -> Outcome:
    """A job not started: its document's Work Master is edited (an Update)."""
    _check_version(job.recipe, expected)
    recipe = interpreter.edited_recipe(job.recipe, edit)
    edited = with_recipe(job, recipe)
    equipment = await manager.equipment(scope, edited)
    held = await manager.dispatcher.admitted_equipment(scope, job.job_order_id)
    if held is not None and equipment != held:
        return Outcome(
            ReturnStatus.INVALID_JOB_ORDER_STATUS,
            f"invalid-state: job order {job.job_order_id!r} was let start holding "
            f"{', '.join(held) or 'no equipment'}; this edit would need "
            f"{', '.join(equipment) or 'none'} (RevokeStart it first)",
        )
    before = recipe_version(job.recipe)

    def apply(current: StoredJob) -> StoredJob:
        if recipe_version(current.recipe) != before:
            raise _Changed
        return with_recipe(current, recipe)

    result = await manager.repository.transition(
        scope, job.job_order_id, Trigger.UPDATE, apply, equipment=equipment
    )
    outcome = await manager._finish(scope, job.job_order_id, "Update", result, cause)
    if outcome.status is ReturnStatus.INVALID_JOB_ORDER_STATUS:
        raise _Changed  # it started meanwhile: edited where it runs now
    return Outcome(outcome.status, recipe_version(recipe) if outcome.ok else outcome.message)


async def _edit_running(
    manager: JobManager,
    scope: str,
    job: StoredJob,
    interpreter: StepEditor,
    edit: StepEdit,
    expected: str | None,
) -> Outcome:
    """A job whose recipe runs: its interpreter edits it, then the document records it."""
    recipe = await interpreter.edit_running(scope, job.job_order_id, edit, expected=expected)
    if recipe is None:  # paused before its first step: it starts from its document
        return await _edit_parked(manager, scope, job, interpreter, edit, expected)

    def record(current: StoredJob) -> StoredJob:
        return with_recipe(current, recipe)

    # The edit stands once the interpreter made it; a job cleared meanwhile records nothing.
    await manager.drive(scope, job.job_order_id, Trigger.RESULT_UPDATE, record)
    return Outcome(ReturnStatus.NO_ERROR, recipe_version(recipe))


async def _edit_parked(
    manager: JobManager,
    scope: str,
    job: StoredJob,
    interpreter: StepEditor,
    edit: StepEdit,
    expected: str | None,
) -> Outcome:
    """A job Running or Interrupted whose recipe has not started (a breakpoint on its first
    step): its document is edited, in a compare-and-swap; if its Resume started it from the
    document as it was meanwhile, what it runs is edited too."""
    edited: list[Any] = []

    def apply(current: StoredJob) -> StoredJob:
        _check_version(current.recipe, expected)
        edited[:] = [current.recipe, interpreter.edited_recipe(current.recipe, edit)]
        return with_recipe(current, edited[1])

    if not await manager.drive(scope, job.job_order_id, Trigger.RESULT_UPDATE, apply):
        raise _Changed
    before, recipe = edited
    for pause in STARTING_PAUSES:
        try:
            await interpreter.edit_running(
                scope, job.job_order_id, edit, expected=recipe_version(before)
            )
        except ValidationError:
            break  # it started from the edited document (a conflict): nothing more to edit
        except TransientError:  # its recipe is starting right now: look again once it has
            await anyio.sleep(pause)
            continue
        break
    return Outcome(ReturnStatus.NO_ERROR, recipe_version(recipe))


def traced(edit: StepEdit, outcome: Outcome) -> Outcome:
    """The outcome as the trace records it: an accepted edit says what it did, and the job's
    new recipe version (``insert x after a: sha256:...``)."""
    if not outcome.ok:
        return outcome
    new = edit.new.get("name") if isinstance(edit.new, Mapping) else None
    what = {
        EditOp.ADD: f"add {new}",
        EditOp.INSERT: f"insert {new} after {edit.step}",
        EditOp.REPLACE: f"replace {edit.step} with {new}",
        EditOp.DELETE: f"delete {edit.step}",
        EditOp.RESET: "reset",
    }[edit.op]
    return Outcome(outcome.status, f"{what}: {outcome.message}")


def _check_version(recipe: Any, expected: str | None) -> None:
    if expected is not None and recipe_version(recipe) != expected:
        raise ValidationError(
            "RecipeVersion",
            f"conflict: the job's recipe is {recipe_version(recipe)}, not {expected}",
        )


def with_recipe(job: StoredJob, recipe: Any) -> StoredJob:
    """The job running ``recipe``: its Work Master's Data and its ``RecipeVersion`` entry."""
    response = job.response
    data = [entry for entry in response.job_response_data or [] if entry.id != RECIPE_VERSION_ID]
    data.insert(0, Parameter(id=RECIPE_VERSION_ID, value=recipe_version(recipe)))
    return dataclasses.replace(
        job,
        work_master_document={**job.work_master_document, "Data": recipe},
        response=dataclasses.replace(response, job_response_data=data),
    )


def edit_arguments(data: Any) -> tuple[str, StepEdit, str | None]:
    """JobOrderID, the edit and the expected RecipeVersion of a call (``ValidationError``)."""
    if not isinstance(data, Mapping):
        raise ValidationError("data", "must be a JSON object {JobOrderID, Edit, Step, NewStep}")
    job = data.get("JobOrderID")
    if not isinstance(job, str) or not job:
        raise ValidationError("JobOrderID", "is required")
    try:
        op = EditOp(str(data.get("Edit")))
    except ValueError:
        choices = ", ".join(op.value for op in EditOp)
        raise ValidationError(
            "Edit", f"must be one of {choices}, got {data.get('Edit')!r}"
        ) from None
    step, new, expected = data.get("Step"), data.get("NewStep"), data.get("RecipeVersion")
    if step is not None and not isinstance(step, str):
        raise ValidationError("Step", "must be a string: the step the edit is about")
    if op in (EditOp.INSERT, EditOp.REPLACE, EditOp.DELETE) and not step:
        raise ValidationError("Step", f"is required for {op.value}")
    if op in (EditOp.ADD, EditOp.INSERT, EditOp.REPLACE) and not isinstance(new, Mapping):
        raise ValidationError("NewStep", f"is required for {op.value}: the step, a JSON object")
    if expected is not None and not isinstance(expected, str):
        raise ValidationError("RecipeVersion", "must be a string (sha256:...)")
    return job, StepEdit(op, step, new), expected
