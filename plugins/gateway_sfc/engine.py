"""The SFC semantics, as a pure function of (chart, execution state, stimulus, time).

``Executor`` changes an ``Execution`` in place for one stimulus (start, a reply, an event, a
timer, an MES command) and returns the ``Effects`` the caller must carry out: commands to send,
durable timers to set, a report to job control. It does no I/O, so the caller can run it inside a
compare-and-swap loop (read state, apply, write if unchanged meanwhile) and tests can drive it
with a fake clock.

The chart advances in ``settle``: dispatch what is due, and for every active node whose work is
complete, take the first enabled outgoing transition (priority order), leave the node and enter
the target. Steps without actions complete at once; branches complete when their paths have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.conditions import Condition, ConditionError, ConditionScope
from gateway.formats import (
    ActionRun,
    Effects,
    Execution,
    NodeRun,
    Phase,
    Report,
    Status,
    Timer,
    TimerKind,
    answerable,
    defer,
    dispatch,
    finish,
    mes_command,
    resend,
)
from gateway.recipes import JobCommand
from gateway_sfc.chart import Chart, Edge
from gateway_sfc.guards import assertion_error, skip_reason
from gateway_sfc.model import Action, BranchType, Interaction, OnError, Qualifier
from gateway_sfc.pipeline import pipeline_timeout

# Entering more nodes than this in one settle means transitions loop without ever waiting.
MAX_ENTRIES_PER_SETTLE = 1000
# ``Execution.memo`` key: per step run again by its ``retry``, how many times it has run.
STEP_RUNS = "step_runs"


class ChartLoopError(Exception):
    """Transitions keep entering nodes without anything to wait for."""


class Executor:
    """Applies stimuli to one job's execution state. Cheap to build per work item."""

    def __init__(
        self,
        chart: Chart,
        parameters: Mapping[str, Any],
        recheck_seconds: float = 0.25,
        liveness_seconds: float = 0.0,
    ) -> None:
        self.chart = chart
        self.recipe = chart.recipe
        self.parameters = parameters
        self.recheck_seconds = recheck_seconds
        # Actions without a timeout on equipment that may go offline are checked this often
        # (0: never), so they fail as "equipment offline" instead of waiting forever.
        self.liveness_seconds = liveness_seconds
        self._actions = chart.dispatchable
        self._entries = 0

    # -- stimuli ----------------------------------------------------------------------------

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        """The job's first state; its tries are numbered on from ``attempts`` (an earlier run
        of the job id: a late reply to that run must not match a try of this one)."""
        execution = Execution(scope=scope, job=job, attempts=dict(attempts or {}))
        effects = Effects(changed=True)
        self._guarded(
            execution, effects, lambda: self._enter(execution, self.chart.initial, now, effects)
        )
        self.settle(execution, now, effects)
        return execution, effects

    def on_reply(
        self,
        execution: Execution,
        action: str,
        attempt: int,
        data: Any,
        error: str | None,
        now: float,
        *,
        delivered: bool = True,
    ) -> Effects:
        """The equipment answered try ``attempt`` (``delivered=False``: it could not be sent)."""
        effects = Effects()
        run = answerable(execution, action, attempt)
        if run is None:
            return effects  # late, repeated or for a cancelled try: nothing to do
        if run.dispatched_at is not None:
            effects.reply = (now - run.dispatched_at, error is not None)
        if error is not None:
            reason = f"equipment reported: {error}" if delivered else f"not delivered: {error}"
            self._action_failed(execution, run, reason, now, effects)
            if data is not None and (_failed(run)):
                # What the equipment measured while failing (the torque it reached...) goes to
                # the Job Response beside the error. Only once no try is left: a result a
                # transition could read is always a successful one.
                execution.results[run.name] = data
        else:
            refused = assertion_error(self._action(run), self._results_scope(execution), data)
            if refused is None:
                self._action_done(execution, run, data, effects)
            else:
                self._action_failed(execution, run, refused, now, effects)
                if _failed(run):  # what it read, beside the error
                    execution.results[run.name] = data
        self.settle(execution, now, effects)
        return effects

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        effects = Effects()
        run = execution.actions.get(action)
        if run is None or run.phase is not Phase.WAITING:
            return effects
        self._action_done(execution, run, data, effects)
        self.settle(execution, now, effects)
        return effects

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        """``offline``: why the action's equipment is offline, when the caller knows it is."""
        effects = Effects()
        if timer.due > now:
            # Fired early by another instance's clock: set it again rather than lose it.
            effects.timers.append(timer)
            return effects
        run = execution.actions.get(timer.action)
        waiting = (
            run is not None
            and run.attempt == timer.attempt
            and run.phase in (Phase.DISPATCHED, Phase.WAITING)
            # Held too: a parallel action still waits, and its time runs out all the same (its
            # timer is not set again: after Resume nothing would end the wait).
            and execution.status in (Status.RUNNING, Status.PAUSED, Status.HELD)
        )
        if timer.kind is TimerKind.TIMEOUT and run is not None and waiting:
            waited = "no reply" if run.phase is Phase.DISPATCHED else "no event"
            error = f"{waited} within {self._action(run).timeout_seconds:g} s"
            self._action_failed(
                execution, run, f"{offline} ({error})" if offline else error, now, effects
            )
        elif timer.kind is TimerKind.LIVENESS and run is not None and waiting:
            if offline:
                self._action_failed(execution, run, offline, now, effects)
            else:
                effects.timers.append(replace(timer, due=now + self.liveness_seconds))
        elif timer.kind is TimerKind.LIMIT and run is not None and run.active:
            run.phase = Phase.DONE  # L: the time limit ends the action, without an error
            effects.changed = True
        elif timer.kind is TimerKind.RECHECK and execution.recheck_at is not None:
            execution.recheck_at = None
            effects.changed = True
        self.settle(execution, now, effects)
        return effects

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        effects = Effects()
        if mes_command(execution, command, effects):  # resumed from held
            self._retry_held_actions(execution)
        self.settle(execution, now, effects)
        return effects

    def on_resume(self, execution: Execution, now: float) -> Effects:
        """Recovery: re-send commands still waiting for a reply, and advance what can."""
        effects = resend(execution, Effects())
        self.settle(execution, now, effects)
        return effects

    # -- advancing --------------------------------------------------------------------------

    def settle(self, execution: Execution, now: float, effects: Effects) -> None:
        """Advance the chart as far as it goes without waiting for anything."""
        self._entries = 0
        self._guarded(execution, effects, lambda: self._advance(execution, now, effects))

    def _guarded(self, execution: Execution, effects: Effects, work: Any) -> None:
        try:
            work()
        except ConditionError as error:
            self._condition_failed(execution, error, effects)
        except ChartLoopError as error:
            finish(execution, effects, "aborted", str(error))

    def _condition_failed(
        self, execution: Execution, error: ConditionError, effects: Effects
    ) -> None:
        """A condition that cannot be decided is a step error, never a silent wait.

        When the cause is a field an action's result lacks, that action's ``on_error`` decides:
        ``hold`` holds the job with the action failed, so the MES's Resume runs it again (a
        fresh result, perhaps from repaired equipment); otherwise the job is aborted.
        """
        action = self._actions.get(error.action or "")
        if action is None or self.recipe.on_error_of(action) is not OnError.HOLD:
            finish(execution, effects, "aborted", str(error))
            return
        run = execution.actions.get(action.name)
        if run is None:  # done, and so moved to the history (``take_done``): it fails again
            run = execution.actions[action.name] = _new_run(action, action.step)
            run.attempt = execution.attempts.get(action.name, 0)
        run.phase = Phase.FAILED
        run.error = str(error)
        execution.status = Status.HELD
        execution.failed_action = run.name
        execution.error = str(error)
        effects.report = Report.HOLD
        effects.changed = True

    def _advance(self, execution: Execution, now: float, effects: Effects) -> None:
        moved = True
        while moved and execution.status is Status.RUNNING:
            moved = self._dispatch_due(execution, now, effects)
            for name in list(execution.nodes):
                node = execution.nodes.get(name)
                if node is not None and execution.status is Status.RUNNING:
                    moved = self._try_leave(execution, node, now, effects) or moved
        finished = execution.status is Status.RUNNING and not execution.nodes
        if finished and not any(run.active for run in execution.actions.values()):
            finish(execution, effects, "completed")

    def _dispatch_due(self, execution: Execution, now: float, effects: Effects) -> bool:
        dispatched = False
        for run in execution.actions.values():
            due = run.not_before is None or run.not_before <= now
            if run.phase is Phase.PENDING and due:
                skipped = run.tries == 0 and skip_reason(
                    self._action(run), self._results_scope(execution)
                )
                if skipped:  # nothing sent: done, with why (and nothing to undo)
                    run.phase = Phase.DONE
                    run.error = skipped
                    effects.changed = True
                else:
                    self._dispatch(execution, run, now, effects)
                dispatched = True
        return dispatched

    def _dispatch(self, execution: Execution, run: ActionRun, now: float, effects: Effects) -> None:
        action = self._action(run)
        timeout = action.timeout_seconds
        if action.pipeline is not None:  # its steps wait, one after the other
            timeout = pipeline_timeout(action)
        dispatch(
            execution,
            run,
            now,
            effects,
            timeout=timeout,
            side_effects=action.has_side_effects,
            command=action.interaction is Interaction.PUSH_COMMAND,
        )
        if run.deadline is None and action.equipment and self.liveness_seconds:
            due = now + self.liveness_seconds
            effects.timers.append(Timer(due, TimerKind.LIVENESS, run.name, run.attempt))

    def _try_leave(self, execution: Execution, node: NodeRun, now: float, effects: Effects) -> bool:
        if node.branch and not node.selected:
            return self._select_path(execution, node, now, effects)
        if not self._complete(execution, node):
            return False
        successors = self.chart.nodes[node.name].successors
        if not successors:
            self._exit(execution, node, effects)
            container = self.chart.nodes[node.name].container
            if container is not None:
                execution.nodes[container.branch].open_paths.remove(container.index)
            return True
        scope = self._condition_scope(execution, node, now)
        edge = self._first_enabled(successors, scope, f"transition from {node.name}")
        if edge is None:
            self._recheck_later(execution, [e.condition for e in successors], now, effects)
            return False
        self._exit(execution, node, effects)
        self._enter(execution, edge.target, now, effects)
        return True

    def _first_enabled(
        self, edges: tuple[Edge, ...], scope: ConditionScope, what: str
    ) -> Edge | None:
        for edge in edges:
            try:
                if edge.condition.evaluate(scope):
                    return edge
            except ConditionError as error:
                raise _in(f"{what} to {edge.target}", error) from None
        return None

    def _complete(self, execution: Execution, node: NodeRun) -> bool:
        if node.branch:
            return node.selected and not node.open_paths
        return not any(
            run.step == node.name and run.blocking and not run.stored and run.active
            for run in execution.actions.values()
        )

    def _select_path(
        self, execution: Execution, node: NodeRun, now: float, effects: Effects
    ) -> bool:
        """Selection divergence: enter the first path whose guard holds (priority order)."""
        info = self.chart.branches[node.name]
        guards = sorted(enumerate(info.guards), key=lambda pair: (pair[1].priority, pair[0]))
        scope = self._condition_scope(execution, node, now)
        for index, guard in guards:
            try:
                enabled = guard.condition.evaluate(scope)
            except ConditionError as error:
                raise _in(f"guard of {node.name} path {index + 1}", error) from None
            if enabled:
                node.selected = True
                node.open_paths = [index]
                self._enter(execution, info.paths[index][0], now, effects)
                return True
        self._recheck_later(execution, [guard.condition for guard in info.guards], now, effects)
        return False

    def _enter(self, execution: Execution, name: str, now: float, effects: Effects) -> None:
        self._entries += 1
        if self._entries > MAX_ENTRIES_PER_SETTLE:
            raise ChartLoopError(
                f"the chart entered {MAX_ENTRIES_PER_SETTLE} nodes without waiting "
                f"(last: {name}); a loop's transitions never wait for an action"
            )
        effects.changed = True
        node = NodeRun(name=name, entered_at=now, branch=name in self.chart.branches)
        execution.nodes[name] = node
        runs = execution.memo.get(STEP_RUNS)
        if runs and runs.pop(name, None) is not None and not runs:
            del execution.memo[STEP_RUNS]  # entered afresh (a loop): its retries start over
        if not node.branch:
            self._start_actions(execution, name, now, effects)
            return
        info = self.chart.branches[name]
        if info.type is BranchType.SIMULTANEOUS:
            node.selected = True
            node.open_paths = list(range(len(info.paths)))
            for path in info.paths:
                self._enter(execution, path[0], now, effects)
        else:
            self._select_path(execution, node, now, effects)

    def _start_actions(self, execution: Execution, step: str, now: float, effects: Effects) -> None:
        for action in self.recipe.actions_of(step):
            if action.qualifier is Qualifier.P0:
                continue  # fires when the step is left
            if action.qualifier is Qualifier.R:
                self._reset(execution, action.name)
                continue
            run = self._fresh_run(execution, action, step)
            if action.qualifier is Qualifier.D and action.time_seconds:
                run.not_before = now + action.time_seconds
                effects.timers.append(Timer(run.not_before, TimerKind.DUE, run.name))
            if action.qualifier is Qualifier.L and action.time_seconds:
                run.limit_at = now + action.time_seconds
                effects.timers.append(Timer(run.limit_at, TimerKind.LIMIT, run.name))

    def _fresh_run(self, execution: Execution, action: Action, step: str) -> ActionRun:
        """A new activation: loops re-entering a step start from a clean action state."""
        run = execution.actions[action.name] = _new_run(action, step)
        execution.results.pop(action.name, None)
        return run

    def _reset(self, execution: Execution, name: str) -> None:
        run = execution.actions.get(name)
        if run is not None and run.stored and run.active:
            run.phase = Phase.CANCELLED

    def _exit(self, execution: Execution, node: NodeRun, effects: Effects) -> None:
        del execution.nodes[node.name]
        effects.changed = True
        if node.branch:
            return
        for run in execution.actions.values():
            # What the step still waits for ends with it; commands already sent (P, S) may
            # still answer and are recorded.
            if (
                run.step == node.name
                and not run.stored
                and run.phase in (Phase.PENDING, Phase.WAITING)
            ):
                run.phase = Phase.CANCELLED
        for action in self.recipe.actions_of(node.name):
            if action.qualifier is Qualifier.P0:
                run = self._fresh_run(execution, action, node.name)
                run.blocking = False

    # -- outcomes ---------------------------------------------------------------------------

    def _action_done(
        self, execution: Execution, run: ActionRun, data: Any, effects: Effects
    ) -> None:
        run.phase = Phase.DONE
        run.error = None
        execution.results[run.name] = data
        effects.changed = True

    def _action_failed(
        self, execution: Execution, run: ActionRun, error: str, now: float, effects: Effects
    ) -> None:
        action = self._action(run)
        policy = self.recipe.retry_of(action)
        run.error = error
        effects.changed = True
        if run.tries < policy.max_attempts:
            defer(run, now + policy.delay_before(run.tries + 1), effects)
            return
        if self.recipe.on_error_of(action) is OnError.CONTINUE:
            run.phase = Phase.DONE  # with its error: the chart goes on
            return
        if self._retry_step(execution, run, now, effects):
            return
        run.phase = Phase.FAILED
        runs = execution.memo.get(STEP_RUNS, {}).get(run.step, 1)
        step = f"step {run.step}" + (f", run {runs} times" if runs > 1 else "")
        message = f"action {run.name} ({step}) failed after {run.tries} tries: {error}"
        if self.recipe.on_error_of(action).value == "hold":
            execution.status = Status.HELD
            execution.failed_action = run.name
            execution.error = message
            effects.report = Report.HOLD
        else:
            finish(execution, effects, "aborted", message)

    def _retry_step(
        self, execution: Execution, run: ActionRun, now: float, effects: Effects
    ) -> bool:
        """Run the failed action's step again when its ``retry`` has runs left: every action
        it started on entry starts afresh (the tries still out are dropped: their late replies
        match no try) once the backoff has passed (a durable ``DUE`` timer)."""
        step = self.recipe.step(run.step)
        policy = None if step is None else step.retry
        if policy is None or run.step not in execution.nodes:
            return False  # no step retry, or a stored (S) action failing after its step
        runs = execution.memo.setdefault(STEP_RUNS, {})
        done = int(runs.get(run.step, 1))
        if done >= policy.max_attempts:
            return False
        runs[run.step] = done + 1
        actions = self.recipe.actions_of(run.step)
        for action in actions:  # replaced as a step entered again replaces them, in order
            execution.actions.pop(action.name, None)
        start = now + policy.delay_before(done + 1)
        self._start_actions(execution, run.step, start, effects)
        for action in actions:
            again = execution.actions.get(action.name)
            fresh = again is not None and again.phase is Phase.PENDING and again.tries == 0
            if fresh and again is not None and again.not_before is None and start > now:
                defer(again, start, effects)
        return True

    def _retry_held_actions(self, execution: Execution) -> None:
        """MES Resume of a held job: every action that failed and holds it is tried again
        (parallel branches may each have failed; ``failed_action`` names the last)."""
        for run in execution.actions.values():
            if run.phase is not Phase.FAILED:
                continue
            run.phase = Phase.PENDING
            run.tries = 0
            run.not_before = None
            # A result a condition could not use is replaced by the retry's, not read again.
            execution.results.pop(run.name, None)

    # -- helpers ----------------------------------------------------------------------------

    def _action(self, run: ActionRun) -> Action:
        return self._actions[run.name]

    def _results_scope(self, execution: Execution) -> ConditionScope:
        """What an action's condition or assertion may read: results, parameters, named
        conditions (no source step: an action's own reply is its assertion's bare names)."""
        return ConditionScope(
            results=execution.results,
            parameters=self.parameters,
            named=self.chart.conditions,
        )

    def _condition_scope(self, execution: Execution, node: NodeRun, now: float) -> ConditionScope:
        source: dict[str, Any] = {}
        pending = False
        blamed: str | None = None
        for action in self.recipe.actions_of(node.name):
            result = execution.results.get(action.name)
            if isinstance(result, Mapping):
                source.update(result)
            if action.name in execution.results:
                blamed = blamed or action.name
            run = execution.actions.get(action.name)
            pending = pending or (run is not None and run.step == node.name and run.active)
        return ConditionScope(
            results={name: as_fields(value) for name, value in execution.results.items()},
            parameters=self.parameters,
            source_results=source,
            elapsed_seconds=now - node.entered_at,
            named=self.chart.conditions,
            source_pending=pending,
            source_action=blamed,
        )

    def _recheck_later(
        self, execution: Execution, conditions: list[Condition], now: float, effects: Effects
    ) -> None:
        """A transition that waits on elapsed time needs a timer; others wait for results."""
        if not any(self._mentions_elapsed(condition, set()) for condition in conditions):
            return
        if execution.recheck_at is not None and execution.recheck_at <= now + self.recheck_seconds:
            return
        execution.recheck_at = now + self.recheck_seconds
        effects.timers.append(Timer(execution.recheck_at, TimerKind.RECHECK))
        effects.changed = True

    def _mentions_elapsed(self, condition: Condition, seen: set[str]) -> bool:
        for reference in condition.references():
            if reference.kind == "elapsed":
                return True
            named = self.chart.conditions.get(reference.name)
            if reference.kind == "bare" and named is not None and reference.name not in seen:
                seen.add(reference.name)
                if self._mentions_elapsed(named, seen):
                    return True
        return False


def _in(element: str, error: ConditionError) -> ConditionError:
    """``error`` raised while deciding ``element``: the message names both."""
    return ConditionError(element, f"{error.element}: {error.reason}", action=error.action)


def as_fields(result: Any) -> Mapping[str, Any]:
    """A result as fields for conditions: mappings as they are, anything else as ``value``."""
    return result if isinstance(result, Mapping) else {"value": result}


def _failed(run: ActionRun) -> bool:
    """Whether no try is left: failed, or done with its error (``on_error: continue``). A
    function: mypy narrowed ``run.phase`` before the call."""
    return run.phase in (Phase.FAILED, Phase.DONE)


def _new_run(action: Action, step: str) -> ActionRun:
    return ActionRun(
        name=action.name,
        step=step,
        blocking=action.qualifier in (Qualifier.N, Qualifier.L, Qualifier.D),
        stored=action.qualifier is Qualifier.S,
    )
