"""Rollback for every format: the compensations of what a failed job did, run before it ends.

``CompensatingExecutor`` wraps a format's executor when its program declares compensations
(``gateway.compensation``). While the job runs it only notes the actions that complete. When
the format's executor ends the job with a failure (``Report.ABORT``) or the MES aborted it
(``Report.RECORD``, not a Stop), the end is held back: the execution becomes ``COMPENSATING``,
the compensations run as actions of the node ``rollback`` (last completed first, those of one
step together), each with its own timeout and tries, and then the end is reported as the format
decided it, with ``SideEffects`` saying whether the rollback made the station safe.

Everything is in the execution state (``Execution.compensable``, ``Execution.rollback``), so a
crash during the rollback resumes it (``on_resume`` sends again what waits for a reply) and every
stimulus stays a pure function of the state, as the formats' rules require.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.compensation import compensations
from gateway.fanout import member_name, split_member
from gateway.formats import (
    ActionRun,
    ActionSpec,
    Effects,
    Execution,
    Executor,
    NodeRun,
    Phase,
    Program,
    Report,
    Rollback,
    Status,
    Timer,
    TimerKind,
)
from gateway.recipes import JobCommand

ROLLBACK_NODE = "rollback"
"""The node active while compensations run (the web UI shows it, observers hear of it)."""


class CompensatingExecutor:
    """``gateway.formats.Executor``: ``inner``'s rules, and the rollback after a failure."""

    def __init__(self, inner: Executor, program: Program) -> None:
        self.inner = inner
        self.specs = program.actions
        self.compensations = compensations(program)  # name -> (action undone, spec)

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        execution, effects = self.inner.start(scope, job, now, attempts)
        return execution, self._after(execution, effects, now)

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
        if execution.status is Status.COMPENSATING:
            return self._reply(execution, action, attempt, data, error, now, delivered)
        effects = self.inner.on_reply(
            execution, action, attempt, data, error, now, delivered=delivered
        )
        return self._after(execution, effects, now)

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        if execution.status is Status.COMPENSATING:
            return Effects()  # the actions waiting for events were cancelled
        return self._after(execution, self.inner.on_event(execution, action, data, now), now)

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        if execution.status is not Status.COMPENSATING:
            return self._after(execution, self.inner.on_timer(execution, timer, now, offline), now)
        effects = Effects()
        if timer.due > now:  # fired early by another instance's clock: set it again
            effects.timers.append(timer)
            return effects
        run = self._waiting(execution, timer.action, timer.attempt)
        if timer.kind is TimerKind.TIMEOUT and run is not None:
            seconds = self._comp(run.name)[1].timeout_seconds or 0
            reason = f"no reply within {seconds:g} s"
            self._failed(
                execution, run, f"{offline} ({reason})" if offline else reason, now, effects
            )
        return effects

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        if execution.status is not Status.COMPENSATING:
            return self._after(execution, self.inner.on_command(execution, command, now), now)
        rollback = execution.rollback
        assert rollback is not None
        # A rollback is not paused or cut short: what it undoes must be undone. The MES's
        # Stop or Abort meanwhile set the job's state; the end then only records the results.
        if command in (JobCommand.STOP, JobCommand.ABORT) and rollback.report != Report.RECORD:
            rollback.report = Report.RECORD.value
            return Effects(changed=True)
        return Effects()

    def on_resume(self, execution: Execution, now: float) -> Effects:
        if execution.status is not Status.COMPENSATING:
            return self._after(execution, self.inner.on_resume(execution, now), now)
        effects = Effects()
        effects.sends.extend(
            run.name for run in execution.actions.values() if run.phase is Phase.DISPATCHED
        )
        self._next(execution, now, effects)
        return effects

    # -- while the job runs ---------------------------------------------------------------

    def _after(self, execution: Execution, effects: Effects, now: float) -> Effects:
        """Note what completed; hold back a failed end and start undoing instead."""
        self._note_completed(execution)
        if (
            execution.rollback is None
            and execution.status is Status.FINISHING
            and effects.report in (Report.ABORT, Report.RECORD)
            and execution.outcome != "stopped"
        ):
            self._begin(execution, effects, now)
        return effects

    def _note_completed(self, execution: Execution) -> None:
        # Runs that are done leave the state with the commit of the stimulus that finished
        # them: each is seen here exactly once.
        for run in execution.actions.values():
            spec = self.specs.get(run.name)
            # Done with an error: skipped by its condition, or failed and the recipe went on
            # (continue_on_error): not something that was done.
            if run.phase is not Phase.DONE or spec is None or run.error is not None:
                continue
            if spec.compensation is not None:
                entry = [run.name, run.step, run.attempt]
                if entry not in execution.compensable:
                    execution.compensable.append(entry)
            elif spec.side_effects:
                execution.uncompensated = True

    # -- the rollback -----------------------------------------------------------------------

    def _begin(self, execution: Execution, effects: Effects, now: float) -> None:
        assert effects.report is not None
        assert execution.outcome is not None
        execution.rollback = Rollback(
            outcome=execution.outcome,
            report=effects.report.value,
            error=execution.error,
            groups=_groups(execution.compensable),
        )
        execution.status = Status.COMPENSATING
        execution.nodes[ROLLBACK_NODE] = NodeRun(ROLLBACK_NODE, now)
        effects.report = None
        effects.changed = True
        self._next(execution, now, effects)

    def _next(self, execution: Execution, now: float, effects: Effects) -> None:
        """Start the next group of compensations once none is out; end when all are done, or
        when one failed."""
        rollback = execution.rollback
        assert rollback is not None
        if any(self._is_compensation(run) and run.active for run in execution.actions.values()):
            return
        failed = any(entry["outcome"] == "failed" for entry in rollback.ran)
        while rollback.groups and not failed:
            sent = False
            for action in rollback.groups.pop(0):
                for spec in self._undoing(execution, action):
                    run = execution.actions[spec.name] = ActionRun(spec.name, ROLLBACK_NODE)
                    self._send(execution, run, spec, now, effects)
                    sent = True
            if sent:
                return
        self._end(execution, effects)

    def _undoing(self, execution: Execution, action: str) -> list[ActionSpec]:
        """The compensations that undo ``action``: its own, or, for a fan-out, one per member
        that succeeded (sent to that member)."""
        spec = self.specs[action]
        compensation = spec.compensation
        assert compensation is not None
        if not spec.members:
            return [compensation]
        members = execution.fan_out.get(action, {}).get("members", {})
        return [
            replace(compensation, name=member_name(compensation.name, member), equipment=member)
            for member in spec.members
            if members.get(member, {}).get("ok")
        ]

    def _send(
        self, execution: Execution, run: ActionRun, spec: ActionSpec, now: float, effects: Effects
    ) -> None:
        run.attempt = execution.attempts.get(run.name, 0) + 1
        execution.attempts[run.name] = run.attempt
        run.tries += 1
        run.phase = Phase.DISPATCHED
        run.dispatched_at = now
        run.deadline = now + (spec.timeout_seconds or 0)
        effects.sends.append(run.name)
        effects.timers.append(Timer(run.deadline, TimerKind.TIMEOUT, run.name, run.attempt))
        effects.changed = True

    def _waiting(self, execution: Execution, name: str, attempt: int) -> ActionRun | None:
        run = execution.actions.get(name)
        if run is None or not self._is_compensation(run):
            return None
        return run if run.attempt == attempt and run.phase is Phase.DISPATCHED else None

    def _is_compensation(self, run: ActionRun) -> bool:
        return run.step == ROLLBACK_NODE and self._found(run.name) is not None

    def _found(self, name: str) -> tuple[str, ActionSpec] | None:
        """(the action undone, the compensation's spec) of a compensation run: its own, or
        one member's of a fan-out's (``unclamp@nr2``, sent to that member)."""
        if name in self.compensations:
            return self.compensations[name]
        parts = split_member(name)
        if parts is None or parts[0] not in self.compensations:
            return None
        action, spec = self.compensations[parts[0]]
        if parts[1] not in self.specs[action].members:
            return None
        return action, replace(spec, name=name, equipment=parts[1])

    def _comp(self, name: str) -> tuple[str, ActionSpec]:
        found = self._found(name)
        assert found is not None, name
        return found

    def _reply(
        self,
        execution: Execution,
        name: str,
        attempt: int,
        data: Any,
        error: str | None,
        now: float,
        delivered: bool,
    ) -> Effects:
        effects = Effects()
        run = self._waiting(execution, name, attempt)
        if run is None:
            return effects  # late, repeated, or a reply to an action the failure cancelled
        if run.dispatched_at is not None:
            effects.reply = (now - run.dispatched_at, error is not None)
        if error is not None:
            self._failed(
                execution, run, error if delivered else f"not delivered: {error}", now, effects
            )
            return effects
        run.phase = Phase.DONE
        run.error = None
        if data is not None:
            execution.results[name] = data
        self._ran(execution, run, "done")
        effects.changed = True
        self._next(execution, now, effects)
        return effects

    def _failed(
        self, execution: Execution, run: ActionRun, reason: str, now: float, effects: Effects
    ) -> None:
        spec = self._comp(run.name)[1]
        run.error = reason
        effects.changed = True
        if run.tries < spec.max_attempts:
            self._send(execution, run, spec, now, effects)
            return
        run.phase = Phase.FAILED
        self._ran(execution, run, "failed")
        self._next(execution, now, effects)

    def _ran(self, execution: Execution, run: ActionRun, outcome: str) -> None:
        assert execution.rollback is not None
        entry: dict[str, Any] = {
            "action": self._comp(run.name)[0],
            "compensation": run.name,
            "outcome": outcome,
        }
        if run.error is not None:
            entry["error"] = run.error
        execution.rollback.ran.append(entry)

    def _end(self, execution: Execution, effects: Effects) -> None:
        rollback = execution.rollback
        assert rollback is not None
        for group in rollback.groups:  # left after a failed compensation
            for action in group:
                spec = self.specs[action].compensation
                assert spec is not None
                rollback.ran.append(
                    {"action": action, "compensation": spec.name, "outcome": "not run"}
                )
        rollback.groups = []
        failures = [entry for entry in rollback.ran if entry["outcome"] != "done"]
        rollback.safe = not failures and not execution.uncompensated
        execution.side_effects = not rollback.safe
        if failures:
            first = failures[0]
            why = f": {first['error']}" if "error" in first else ""
            execution.error = (
                f"{rollback.error}; rollback failed: {first['compensation']}{why}"
                if rollback.error
                else f"rollback failed: {first['compensation']}{why}"
            )
        execution.nodes.pop(ROLLBACK_NODE, None)
        execution.status = Status.FINISHING
        effects.report = Report(rollback.report)
        effects.changed = True


def _groups(compensable: list[list[Any]]) -> list[list[str]]:
    """The actions to undo, last completed first; consecutive ones of the same step together
    (a ``par`` block, the actions of one SFC step), each action once per group."""
    groups: list[list[str]] = []
    last_step: str | None = None
    for action, step, _attempt in reversed(compensable):
        if groups and step == last_step:
            if action not in groups[-1]:
                groups[-1].append(action)
        else:
            groups.append([action])
        last_step = step
    return groups


def member_compensation_spec(program: Program, name: str) -> ActionSpec | None:
    """The spec of one member's compensation of a fan-out (``unclamp@nr2``)."""
    parts = split_member(name)
    if parts is None:
        return None
    for action, spec in compensations(program).values():
        if spec.name == parts[0] and parts[1] in program.actions[action].members:
            return replace(spec, name=name, equipment=parts[1])
    return None


def compensating(executor: Executor, program: Program) -> Executor:
    """``executor`` with the rollback when ``program`` declares compensations (else itself)."""
    if any(spec.compensation is not None for spec in program.actions.values()):
        return CompensatingExecutor(executor, program)
    return executor
