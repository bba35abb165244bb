"""The SFC recipe interpreter and the engine service that runs its charts."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskStatus

from gateway.recipes import JobCommand, RecipeJob, RecipeProgress
from gateway.routing import EquipmentUse
from gateway_sfc.chart import RecipeError
from gateway_sfc.coordination import Coordinator
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.progress import read_progress
from gateway_sfc.svg import render_svg
from gateway_sfc.validation import load_chart, recipe_equipment_uses

if TYPE_CHECKING:
    from gateway.app import Gateway


class SfcInterpreter:
    """``gateway.recipes.RecipeInterpreter`` for SFC recipes: work goes to the work stream.

    Also a ``gateway.recipes.RecipeViewer``: it draws charts and reports a job's progress; and a
    ``gateway.recipes.EquipmentUser``: it lists what a recipe asks of equipment.
    """

    dataschema = DATASCHEMA

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    # Both are asked for every job stored: they use the engine's compiled charts (a Work
    # Master's recipe is loaded and compiled once, not once per job).

    def validate(self, recipe: Any) -> Sequence[str]:
        try:
            self.coordinator.recipes.chart(recipe)
        except RecipeError as error:
            return list(error.problems)
        return []

    def equipment_uses(self, recipe: Any) -> Sequence[EquipmentUse]:
        try:
            return recipe_equipment_uses(self.coordinator.recipes.chart(recipe).recipe)
        except RecipeError:
            return []

    async def start(self, job: RecipeJob) -> None:
        await self.coordinator.start_job(job)

    async def command(self, job: RecipeJob, command: JobCommand) -> None:
        await self.coordinator.command_job(job, command)

    def render_svg(self, recipe: Any, active: Collection[str] = ()) -> str:
        return render_svg(load_chart(recipe), active)

    async def progress(self, scope: str, job_order_id: str) -> RecipeProgress | None:
        return await read_progress(self.coordinator.context.store, scope, job_order_id)


class SfcEngineService:
    """Takes work entries, fires timers and recovers orphaned work, on every gateway instance."""

    name = "sfc-engine"
    roles = frozenset({"gateway", "engine"})

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        await self.coordinator.run(task_status=task_status)
