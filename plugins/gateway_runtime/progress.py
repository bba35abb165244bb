"""A running job's progress as the web UI shows it (``gateway.recipes.RecipeProgress``).

Read from the execution state the runtime keeps per job, the actions it has done (its history)
and the program it started with (its snapshot), never written: a display may be a moment
behind, it never gets in the runtime's way. The state of an ended job expires
(``runtime.ended_ttl_seconds``); then there is no progress, only the Job Response.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gateway.compensation import compensations
from gateway.formats import ActionSpec
from gateway.recipes import ActionProgress, RecipeProgress, StepProgress
from gateway_runtime.state import load_action_run, load_execution

if TYPE_CHECKING:
    from gateway_runtime.coordination import Coordinator


async def read_progress(coordinator: Coordinator, scope: str, job: str) -> RecipeProgress | None:
    context = coordinator.context
    keys = context.keys
    async with context.client.pipeline(transaction=False) as pipe:  # one round trip
        pipe.get(keys.execution(scope, job))
        pipe.get(keys.recipe(scope, job))
        pipe.hgetall(keys.history(scope, job))
        state, snapshot, history = await pipe.execute()
    if state is None:
        # Paused at a breakpoint on its first step, its state not created yet?
        parked = await coordinator.breakpoints.parked_at(scope, job)
        if parked is None:
            return None
        return RecipeProgress("paused", (), (), {}, paused_before=parked)
    execution = load_execution(state)
    specs: dict[str, ActionSpec] = {}
    if snapshot is not None:
        data = json.loads(snapshot)
        program = coordinator.recipes.program(data["dataschema"], data["recipe"])
        specs = dict(program.actions)
        specs.update((name, spec) for name, (_, spec) in compensations(program).items())
    order = {name: index for index, name in enumerate(specs)}
    # The actions done are in the history, the others (and a new activation of one done
    # before) in the state; shown in the recipe's order.
    runs = {name: load_action_run(text) for name, text in history.items()}
    runs.update(execution.actions)
    shown = sorted(runs.values(), key=lambda run: order.get(run.name, len(order)))
    return RecipeProgress(
        status=str(execution.status),
        active=[
            StepProgress(node.name, node.entered_at, node.branch)
            for node in execution.nodes.values()
        ],
        actions=[
            ActionProgress(
                name=run.name,
                step=run.step,
                phase=str(run.phase),
                attempt=run.attempt,
                tries=run.tries,
                max_attempts=specs[run.name].max_attempts if run.name in specs else 1,
                dispatched_at=run.dispatched_at,
                deadline=run.deadline if run.active else None,
                error=run.error,
                result=execution.results.get(run.name),
            )
            for run in shown
        ],
        results=dict(execution.results),
        error=execution.error,
        outcome=execution.outcome,
        paused_before=execution.paused_before,
        breakpoints=tuple(execution.breakpoints),
    )
