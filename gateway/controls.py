"""Controls of a job's steps beyond the MES's methods: breakpoints and edits of its steps.

Optional for a recipe interpreter (``gateway.recipes.RecipeInterpreter``): one that can hold a
job before a step implements ``BreakpointControl``, one that can edit the steps a job has not
begun implements ``StepEditor``. Job management checks what it owns (the job exists and has
not ended, the Work Master is configured) and calls them for the MES's CloudEvents, the
command line and the web UI (``gateway.recipes.JobControl.set_breakpoint`` / ``edit_steps``).
A recipe format edits its own JSON (``gateway.formats.StepEditing``). Users: ``docs/controls.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class EditOp(StrEnum):
    """How an edit changes the steps of a job that it has not begun."""

    ADD = "add"  # a new step after the last one
    INSERT = "insert"  # a new step right after ``StepEdit.step``
    REPLACE = "replace"  # ``StepEdit.step`` replaced by the new step
    DELETE = "delete"  # ``StepEdit.step`` dropped
    RESET = "reset"  # every step not begun yet dropped


@dataclass(frozen=True)
class StepEdit:
    """One edit of a job's pending steps: ``step`` names the step it is about (insert after,
    replace, delete), ``new`` is the new step in the recipe's own JSON (add, insert, replace)."""

    op: EditOp
    step: str | None = None
    new: Any = None


@runtime_checkable
class StepEditor(Protocol):
    """Optional for an interpreter: editing the steps of a job that it has not begun.

    A job not started yet (stored or queued) has its recipe in its Work Master as job
    management keeps it: job management applies ``edited_recipe`` to it. A job whose recipe
    runs is the interpreter's: ``edit_running`` changes what it runs, atomically with its state.
    Either way the result must compile, and a step that has begun cannot be edited.
    """

    def edited_recipe(self, recipe: Any, edit: StepEdit) -> Any:
        """``recipe`` with ``edit`` applied, for a job not started (``ValidationError`` says
        why not)."""
        ...

    async def edit_running(
        self, scope: str, job_order_id: str, edit: StepEdit, *, expected: str | None = None
    ) -> Any:
        """Apply ``edit`` to the recipe the job runs and return the new recipe; ``None`` when
        the job has no execution to edit (its recipe waits in its Work Master: edit that).
        ``expected``: the ``recipe_version`` the caller edits (``ValidationError`` when the job
        runs another). ``ValidationError`` says why an edit cannot be made."""
        ...


BREAKPOINT_REQUESTER = "breakpoint"
"""``requested_by`` of the Pause an interpreter asks for when a job reaches a breakpoint (the
trace says ``breakpoint before <step>``)."""


@runtime_checkable
class BreakpointControl(Protocol):
    """Optional for an interpreter: breakpoints, steps a job pauses before.

    A breakpoint is set on a step of one job (stored, queued or running), or on a step of a
    Work Master for every job of it (the jobs stored before included, running ones too). When
    the job is about to enter that step, it does not: it asks job management for the MES's
    Pause on its own behalf (``requested_by`` ``breakpoint before <step>``), so the job goes to
    Interrupted.Suspended; the MES's (or an operator's) Resume then enters the step.
    """

    def breakpoint_steps(self, recipe: Any) -> Sequence[str]:
        """The names a breakpoint of ``recipe`` may name (``ValidationError``: it cannot run)."""
        ...

    async def set_breakpoint(
        self,
        scope: str,
        step: str,
        *,
        job_order_id: str | None = None,
        work_master_id: str | None = None,
        enabled: bool = True,
    ) -> None:
        """Set (``enabled``) or clear the breakpoint on ``step`` of one job or Work Master."""
        ...
