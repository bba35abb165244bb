"""A running job's progress as the web UI shows it (``gateway.recipes.RecipeProgress``).

Read from the execution state the runtime keeps per job, the actions it has done (its history)
and the program it started with (its snapshot), never written: a display may be a moment
behind, it never gets in the runtime's way. The state of an ended job expires
(``runtime.ended_ttl_seconds``); then there is no progress, only the Job Response.

Each command sent at least once carries a link to where its work can be followed when the
plugin that carried it out gives one (``gateway_command_link``: a job the line plugin runs on a
downstream station), asked with the command of its last try as it was sent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.compensation import compensations
from gateway.equipment import CommandLink
from gateway.formats import ActionRun, ActionSpec, Interaction
from gateway.recipes import ActionProgress, RecipeProgress, StepProgress
from gateway_runtime.snapshots import Snapshot
from gateway_runtime.state import load_action_run, load_execution

if TYPE_CHECKING:
    from gateway_runtime.coordination import Coordinator

log = logging.getLogger(__name__)


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
    program: Snapshot | None = None
    if snapshot is not None:
        program = coordinator.recipes.parse(snapshot)  # its actions routed as the job started
        specs = dict(program.program.actions)
        specs.update((name, spec) for name, (_, spec) in compensations(program.program).items())
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
                link=command_link(coordinator, program, scope, job, run),
            )
            for run in shown
        ],
        results=dict(execution.results),
        error=execution.error,
        outcome=execution.outcome,
        paused_before=execution.paused_before,
        breakpoints=tuple(execution.breakpoints),
    )


def command_link(
    coordinator: Coordinator, snapshot: Snapshot | None, scope: str, job: str, run: ActionRun
) -> CommandLink | None:
    """Where the last try of ``run`` can be followed, if the plugin that carried its command out
    says (``gateway_command_link``); ``None`` for a command never sent, or an event waited for."""
    if snapshot is None or run.attempt < 1:
        return None
    spec = snapshot.spec(run.name)
    if spec is None or spec.interaction is not Interaction.PUSH_COMMAND or spec.fan_out:
        return None  # a fan-out sends its members' commands, each a run of its own
    command = snapshot.command(scope, job, run.name, run.attempt)
    try:
        link = coordinator.context.gateway.plugins.hook.gateway_command_link(command=command)
    except Exception:  # a display: a plugin's bug must not hide the job's progress
        log.exception("gateway_command_link failed for %s", command.correlation_id)
        return None
    return link if isinstance(link, CommandLink) else None
