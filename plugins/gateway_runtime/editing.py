"""Editing the steps of a running job: a new recipe snapshot, written with its state.

The format decides what an edit does to its recipe and refuses a step that has begun
(``gateway.formats.StepEditing``); the runtime compiles the result, routes the actions it adds
by type (those it keeps stay on the equipment they were routed to at start), and writes the
new snapshot in the compare-and-swap of the job's state, whose ``recipe`` field names the
snapshot's version: any instance that kept the recipe from before reads the new one at its
next step. A state changed meanwhile by another step fails the swap, and the edit is made again
on the new state (a step begun meanwhile then refuses it).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.controls import StepEdit
from gateway.errors import ValidationError
from gateway.formats import Effects, RecipeError, Status, StepEditing
from gateway.recipes import recipe_version
from gateway.resilience import TransientError
from gateway_runtime.binding import bind_equipment
from gateway_runtime.breakpoints import Breakpoints
from gateway_runtime.context import EngineContext
from gateway_runtime.executions import Commit, ExecutionStore, waiting
from gateway_runtime.snapshots import RecipeCache

log = logging.getLogger(__name__)

EDITABLE = (Status.RUNNING, Status.PAUSED, Status.HELD)


class StepEdits:
    """Edits of running jobs' steps (``FormatInterpreter.edit_running``)."""

    def __init__(
        self,
        context: EngineContext,
        executions: ExecutionStore,
        recipes: RecipeCache,
        breakpoints: Breakpoints,
    ) -> None:
        self.context = context
        self.executions = executions
        self.recipes = recipes
        self.breakpoints = breakpoints

    def edited(self, dataschema: str, recipe: Any, edit: StepEdit) -> Any:
        """The recipe of a job not started, edited and checked (``ValidationError``)."""
        edited = _apply(self.context.format(dataschema), recipe, edit, None)
        self._compiled(dataschema, edited)
        return edited

    async def edit(self, scope: str, job: str, edit: StepEdit, expected: str | None = None) -> Any:
        """Apply ``edit`` to what the job runs; the new recipe (``None``: no execution yet)."""
        for _ in range(self.context.settings.max_cas_retries):
            execution = await self.executions.read(scope, job)
            if execution is None:
                if await self.breakpoints.parked_at(scope, job) is not None:
                    return None  # paused before its first step: it starts from its Work Master
                raise TransientError(f"job {scope}/{job} is starting its recipe: try again")
            if execution.status not in EDITABLE:
                raise ValidationError(
                    "job", f"its recipe is {execution.status.value}: no step is left to edit"
                )
            snapshot = await self.recipes.read(scope, job)
            if expected is not None and recipe_version(snapshot.recipe) != expected:
                raise ValidationError(
                    "RecipeVersion",
                    f"conflict: the job runs {recipe_version(snapshot.recipe)}, not {expected}",
                )
            recipe_format = self.context.format(snapshot.dataschema)
            edited = _apply(recipe_format, snapshot.recipe, edit, execution)
            program = self._compiled(snapshot.dataschema, edited)
            bound, problems = await bind_equipment(self.context.gateway.equipment, scope, program)
            if problems:
                raise ValidationError("edit", "unroutable: " + "; ".join(problems))
            kept = {
                name: item for name, item in snapshot.equipment.items() if name in program.actions
            }
            version = recipe_version(edited)
            new = self.recipes.snapshot(
                snapshot.dataschema,
                edited,
                snapshot.parameters,
                snapshot.run,
                {**bound, **kept},
                version,
                # A fan-out keeps the members it had when the job started.
                {name: list(m) for name, m in snapshot.members.items() if name in program.actions},
            )
            execution.recipe = version
            commit = await self.executions.write(
                execution,
                execution.version,
                Effects(changed=True),
                set(),
                waits_for_event=bool(waiting(execution)),
                snapshot=new.document(),
            )
            if commit is Commit.WRITTEN:
                self.recipes.keep(scope, job, new)
                self.executions.forget(scope, job)
                log.info("job %s/%s: steps edited (%s), now %s", scope, job, edit.op.value, version)
                return edited
        raise TransientError(f"job {scope}/{job}: its state kept changing under the edit")

    def _compiled(self, dataschema: str, recipe: Any) -> Any:
        try:
            return self.recipes.program(dataschema, recipe)
        except RecipeError as error:
            raise ValidationError(
                "edit", "the recipe would not compile: " + "; ".join(error.problems)
            ) from None


def _apply(recipe_format: object, recipe: Any, edit: StepEdit, execution: Any) -> Any:
    if not isinstance(recipe_format, StepEditing):
        raise ValidationError("edit", "unsupported: this recipe format cannot edit steps")
    try:
        return recipe_format.edit_steps(recipe, edit, execution)
    except RecipeError as error:
        raise ValidationError("edit", "; ".join(error.problems)) from None
