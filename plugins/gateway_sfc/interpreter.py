"""The SFC recipe interpreter and the engine service that runs its charts."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskStatus

from gateway.recipes import JobCommand, RecipeJob, RecipeProgress
from gateway.routing import EquipmentUse
from gateway_sfc.coordination import Coordinator
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.progress import read_progress
from gateway_sfc.svg import render_svg
from gateway_sfc.validation import equipment_uses, load_chart, validate_recipe

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

    def validate(self, recipe: Any) -> Sequence[str]:
        return validate_recipe(recipe)

    def equipment_uses(self, recipe: Any) -> Sequence[EquipmentUse]:
        return equipment_uses(recipe)

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
