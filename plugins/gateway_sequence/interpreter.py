"""The sequence recipe interpreter and the service that fires its timeouts on every instance."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from gateway.errors import ValidationError
from gateway.recipes import JobCommand, RecipeJob, RecipeProgress
from gateway.routing import EquipmentUse
from gateway_sequence.engine import SequenceEngine
from gateway_sequence.model import DATASCHEMA, RecipeError, load_sequence, validate_sequence
from gateway_sequence.reconcile import reconcile
from gateway_sequence.view import progress, render_svg

if TYPE_CHECKING:
    from gateway.app import Gateway


class SequenceInterpreter:
    """``gateway.recipes.RecipeInterpreter`` for sequence recipes (``DATASCHEMA``); also a
    ``RecipeViewer`` (the web UI draws sequences and shows a job's progress) and an
    ``EquipmentUser`` (job management checks a recipe's routing before a job runs it)."""

    dataschema = DATASCHEMA

    def __init__(self, engine: SequenceEngine) -> None:
        self.engine = engine

    def validate(self, recipe: Any) -> Sequence[str]:
        return validate_sequence(recipe)

    def equipment_uses(self, recipe: Any) -> Sequence[EquipmentUse]:
        """``gateway.recipes.EquipmentUser``: every command step, so job management checks
        that each reaches equipment before a job runs the recipe."""
        try:
            loaded = load_sequence(recipe)
        except RecipeError:
            return []  # validate names the problems
        return [
            EquipmentUse(command.name, command.type_id, command.equipment, command=True)
            for command in loaded.commands()
        ]

    async def start(self, job: RecipeJob) -> None:
        await self.engine.start(job)

    def render_svg(self, recipe: Any, active: Collection[str] = ()) -> str:
        try:
            loaded = load_sequence(recipe)
        except RecipeError as error:
            raise ValidationError("recipe", str(error)) from None
        return render_svg(loaded, active)

    async def progress(self, scope: str, job_order_id: str) -> RecipeProgress | None:
        run = await self.engine.runs.read(scope, job_order_id)
        return None if run is None else progress(self.engine.sequencer(run).recipe, run)

    async def command(self, job: RecipeJob, command: JobCommand) -> None:
        await self.engine.command(job.scope, job.job_order_id, command)


class SequenceService:
    """Fires due timeouts and repairs what crashes interrupted, on every gateway instance."""

    name = "sequence-engine"
    roles = frozenset({"gateway", "engine"})

    def __init__(self, engine: SequenceEngine) -> None:
        self.engine = engine

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        settings = self.engine.settings
        resilience = gateway.resilience
        # Each loop survives store outages under a readiness check of its own. Reconciliation
        # runs at once too: what a crashed instance left is taken over as soon as this starts.
        # Leaving the block stops the loops first, then lets the work in hand finish.
        async with anyio.create_task_group() as work, anyio.create_task_group() as loops:
            self.engine.tasks = work
            task_status.started()
            loops.start_soon(
                resilience.every,
                "sequence-engine.timers",
                settings.timer_poll_seconds,
                self.engine.fire_due_timers,
            )
            loops.start_soon(
                partial(resilience.forever, interval=settings.reconcile_seconds),
                "sequence-engine.reconcile",
                lambda: reconcile(self.engine),
            )
            await gateway.stopping.wait()
            self.engine.tasks = None
            loops.cancel_scope.cancel()
