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
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.compensation import compensations
from gateway.equipment import CommandLink
from gateway.fanout import split_member
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
    # The actions done are in the history, the others (and a new activation of one done
    # before) in the state; shown in the recipe's order, each fan-out's member runs after it,
    # member by member (a member's pipeline steps in their order).
    runs = {name: load_action_run(text) for name, text in history.items()}
    runs.update(execution.actions)
    places = Places(specs, program)
    shown = sorted(runs.values(), key=lambda run: places.key(run.name))
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
                fan_out=places.fan_out(run.name),
                member=places.member(run.name),
            )
            for run in shown
        ],
        results=dict(execution.results),
        error=execution.error,
        outcome=execution.outcome,
        paused_before=execution.paused_before,
        breakpoints=tuple(execution.breakpoints),
    )


class Places:
    """Where each action run is listed: the recipe's order, a fan-out's member runs grouped
    after their action by member (``<action>@<member>``, ``<pipeline step>@<member>``,
    ``<compensation>@<member>``)."""

    def __init__(self, specs: Mapping[str, ActionSpec], snapshot: Snapshot | None) -> None:
        self.order = {name: index for index, name in enumerate(specs)}
        # A member run's base name -> (its fan-out action, the members, its pipeline step)
        self.groups: dict[str, tuple[str, tuple[str, ...], int]] = {}
        if snapshot is None:
            return
        actions = snapshot.program.actions
        for name, spec in actions.items():
            if not spec.members:
                continue
            for index, step in enumerate(spec.pipeline or (spec,)):
                self.groups[step.name] = (name, spec.members, index)
        for undo, (action, _) in compensations(snapshot.program).items():
            if actions[action].members:
                self.groups[undo] = (undo, actions[action].members, 0)

    def _group(self, name: str) -> tuple[str, tuple[str, ...], int, str] | None:
        parts = split_member(name)
        if parts is None or parts[0] not in self.groups:
            return None
        action, members, step = self.groups[parts[0]]
        return action, members, step, parts[1]

    def key(self, name: str) -> tuple[int, int, int, str, int]:
        last = len(self.order)
        group = self._group(name)
        if group is None:
            return self.order.get(name, last), 0, 0, "", 0
        action, members, step, member = group
        place = members.index(member) if member in members else len(members)
        return self.order.get(action, last), 1, place, member, step

    def fan_out(self, name: str) -> str | None:
        group = self._group(name)
        return None if group is None else group[0]

    def member(self, name: str) -> str | None:
        group = self._group(name)
        return None if group is None else group[3]


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
