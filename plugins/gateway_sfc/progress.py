"""A running job's progress as the web UI shows it (``gateway.recipes.RecipeProgress``).

Read from the execution state the engine keeps per job (``sfc:exec:<job>``, see ``keys``), the
actions it has done (``sfc:history:<job>``) and the recipe snapshot it started with
(``sfc:recipe:<job>``), never written: a display may be a moment behind, it never gets in the
engine's way. The state of an ended job expires (``sfc.ended_ttl_seconds``); then there is no
progress, only the Job Response.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gateway.recipes import ActionProgress, RecipeProgress, StepProgress
from gateway_sfc.keys import SfcKeys
from gateway_sfc.model import RetryPolicy, load_recipe
from gateway_sfc.state import load_action_run, load_execution

if TYPE_CHECKING:
    from gateway.store import Store


async def read_progress(store: Store, scope: str, job: str) -> RecipeProgress | None:
    keys = SfcKeys(store.keys)
    async with store.client.pipeline(transaction=False) as pipe:  # one round trip
        pipe.get(keys.execution(scope, job))
        pipe.get(keys.recipe(scope, job))
        pipe.hgetall(keys.history(scope, job))
        state, snapshot, history = await pipe.execute()
    if state is None:
        return None
    execution = load_execution(state)
    policies: dict[str, RetryPolicy] = {}
    order: dict[str, int] = {}
    if snapshot is not None:
        recipe = load_recipe(json.loads(snapshot)["recipe"])
        policies = {action.name: recipe.retry_of(action) for action in recipe.actions}
        order = {action.name: index for index, action in enumerate(recipe.actions)}
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
                max_attempts=policies[run.name].max_attempts if run.name in policies else 1,
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
    )
