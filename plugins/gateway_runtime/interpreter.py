"""One recipe interpreter per installed format, all on the runtime, and the runtime's service."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskStatus

from gateway.compensation import compensations
from gateway.controls import StepEdit
from gateway.errors import ValidationError
from gateway.formats import RecipeError, RecipeFormat
from gateway.recipes import JobCommand, RecipeJob, RecipeProgress
from gateway.routing import EquipmentUse
from gateway_runtime.coordination import Coordinator
from gateway_runtime.progress import read_progress

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.jobmethods import JobMethods


class FormatInterpreter:
    """``gateway.recipes.RecipeInterpreter`` for the recipes of one format; also a
    ``RecipeViewer`` (draws them, reports a job's progress) and an ``EquipmentUser`` (lists
    what a recipe asks of equipment)."""

    def __init__(self, coordinator: Coordinator, recipe_format: RecipeFormat) -> None:
        self.coordinator = coordinator
        self.format = recipe_format
        self.dataschema = recipe_format.dataschema

    # Both are asked for every job stored: they use the runtime's compiled programs (a Work
    # Master's recipe is compiled once, not once per job).

    def validate(self, recipe: Any) -> Sequence[str]:
        try:
            self.coordinator.recipes.program(self.dataschema, recipe)
        except RecipeError as error:
            return list(error.problems)
        except ValidationError as error:
            return [str(error)]
        return []

    def equipment_uses(self, recipe: Any) -> Sequence[EquipmentUse]:
        try:
            program = self.coordinator.recipes.program(self.dataschema, recipe)
        except ValidationError:
            return []
        uses = [use for action in program.actions.values() for use in action.equipment_uses()]
        # A compensation naming no equipment goes to its action's, wherever that is routed.
        uses.extend(
            spec.equipment_use()
            for _, spec in compensations(program).values()
            if spec.equipment is not None
        )
        return uses

    async def start(self, job: RecipeJob) -> None:
        await self.coordinator.start_job(job)

    async def command(self, job: RecipeJob, command: JobCommand) -> None:
        await self.coordinator.command_job(job, command)

    def render_svg(self, recipe: Any, active: Collection[str] = ()) -> str:
        program = self.coordinator.recipes.program(self.dataschema, recipe)
        return self.format.render_svg(program, active)

    async def progress(self, scope: str, job_order_id: str) -> RecipeProgress | None:
        return await read_progress(self.coordinator, scope, job_order_id)

    # ``gateway.recipes.BreakpointControl``: a breakpoint names an action; the job pauses
    # before the step (node) that would send it, or before a node of that name.

    def breakpoint_steps(self, recipe: Any) -> Sequence[str]:
        try:
            program = self.coordinator.recipes.program(self.dataschema, recipe)
        except RecipeError as error:
            raise ValidationError("recipe", "; ".join(error.problems)) from error
        return list(program.actions)

    # ``gateway.recipes.StepEditor``

    def edited_recipe(self, recipe: Any, edit: StepEdit) -> Any:
        return self.coordinator.edits.edited(self.dataschema, recipe, edit)

    async def edit_running(
        self, scope: str, job_order_id: str, edit: StepEdit, *, expected: str | None = None
    ) -> Any:
        return await self.coordinator.edits.edit(scope, job_order_id, edit, expected)

    async def set_breakpoint(
        self,
        scope: str,
        step: str,
        *,
        job_order_id: str | None = None,
        work_master_id: str | None = None,
        enabled: bool = True,
    ) -> None:
        await self.coordinator.breakpoints.set(
            scope, step, job=job_order_id, work_master=work_master_id, enabled=enabled
        )


class RuntimeService:
    """Takes work entries, fires timers and recovers orphaned work, on every gateway instance."""

    name = "recipe-runtime"
    roles = frozenset({"gateway", "engine"})

    def __init__(self, coordinator: Coordinator, methods: JobMethods | None = None) -> None:
        self.coordinator = coordinator
        self.methods = methods  # their status events say when jobs end (``JobMemory``)

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        await self.coordinator.run(task_status=task_status, methods=self.methods)
