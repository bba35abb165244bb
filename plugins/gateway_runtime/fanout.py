"""Fan-out for every format: one action's command to each member of a set of equipment.

A format dispatches a fan-out action as any other (``gateway.fanout``); ``FanOutExecutor``, the
runtime's wrapper of its executor, sends one command per member instead, each an action run
``<action>@<member>`` of the same step with its own correlation id and timeout, and tells the
format's executor of the action's outcome once the policy is decided: a reply to the action's
own try, its data one entry per member, or an error naming every member that failed. The
format's rules (retries, ``on_error``, conditions, rollback) then apply to the action as a whole.

The members' outcomes are kept in ``Execution.fan_out`` (member runs that are done leave the
state with every commit); member runs left when the policy is decided are ended (done, with
their error) so that no format ever sees a run it does not know. Members are fixed when the job
starts (``FannedProgram``: the program with ``ActionSpec.members`` set).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from gateway.fanout import member_name, split_member
from gateway.formats import (
    ActionRun,
    ActionSpec,
    Effects,
    Execution,
    Executor,
    ExecutorOptions,
    Phase,
    Program,
    Timer,
    TimerKind,
)
from gateway.recipes import JobCommand


class FannedProgram:
    """``program`` with its fan-out actions' members fixed (a ``gateway.formats.Program``)."""

    def __init__(self, program: Program, members: Mapping[str, Collection[str]]) -> None:
        self.inner = program
        self.members = {name: tuple(found) for name, found in members.items()}
        self.actions = {
            name: replace(spec, members=self.members[name]) if name in self.members else spec
            for name, spec in program.actions.items()
        }

    def executor(self, parameters: Mapping[str, Any], options: ExecutorOptions) -> Executor:
        return self.inner.executor(parameters, options)

    def bind(self, equipment: Mapping[str, str]) -> FannedProgram:
        return FannedProgram(self.inner.bind(equipment), self.members)


def member_spec(program: Program, name: str) -> ActionSpec | None:
    """The spec of a member run (``tighten@nr2``): its action's, sent to that member."""
    parts = split_member(name)
    if parts is None:
        return None
    spec = program.actions.get(parts[0])
    if spec is None or parts[1] not in spec.members:
        return None
    return replace(spec, name=name, equipment=parts[1], fan_out=None, members=())


def fanning(executor: Executor, program: Program) -> Executor:
    """``executor`` with fan-out when ``program`` has members fixed (else itself)."""
    if any(spec.members for spec in program.actions.values()):
        return FanOutExecutor(executor, program)
    return executor


class FanOutExecutor:
    """``gateway.formats.Executor``: ``inner``'s rules, its fan-out actions sent to members."""

    def __init__(self, inner: Executor, program: Program) -> None:
        self.inner = inner
        self.specs = program.actions

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        execution, effects = self.inner.start(scope, job, now, attempts)
        return execution, self._out(execution, effects, now)

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
        if self._member(action) is None:
            effects = self.inner.on_reply(
                execution, action, attempt, data, error, now, delivered=delivered
            )
            return self._out(execution, effects, now)
        effects = Effects()
        run = execution.actions.get(action)
        if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
            return effects  # late, repeated, or the fan-out was decided without it
        if run.dispatched_at is not None:
            effects.reply = (now - run.dispatched_at, error is not None)
        if error is not None and not delivered:
            error = f"not delivered: {error}"
        return self._member_ended(execution, run, data, error, now, effects)

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        return self._out(execution, self.inner.on_event(execution, action, data, now), now)

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        if self._member(timer.action) is None:
            effects = self.inner.on_timer(execution, timer, now, offline)
            return self._out(execution, effects, now)
        effects = Effects()
        if timer.due > now:  # fired early by another instance's clock: set it again
            effects.timers.append(timer)
            return effects
        run = execution.actions.get(timer.action)
        out = run is not None and run.attempt == timer.attempt and run.phase is Phase.DISPATCHED
        if timer.kind is not TimerKind.TIMEOUT or run is None or not out:
            return effects
        seconds = self.specs[self._member(timer.action) or ""].timeout_seconds or 0
        reason = f"no reply within {seconds:g} s"
        reason = f"{offline} ({reason})" if offline else reason
        return self._member_ended(execution, run, None, reason, now, effects)

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        return self._out(execution, self.inner.on_command(execution, command, now), now)

    def on_resume(self, execution: Execution, now: float) -> Effects:
        return self._out(execution, self.inner.on_resume(execution, now), now)

    # -- the members --------------------------------------------------------------------------

    def _member(self, name: str) -> str | None:
        """The fan-out action a member run belongs to (``None``: not a member run)."""
        parts = split_member(name)
        if parts is None or parts[0] not in self.specs:
            return None
        return parts[0] if parts[1] in self.specs[parts[0]].members else None

    def _out(self, execution: Execution, effects: Effects, now: float) -> Effects:
        """The inner executor's effects with each fan-out action's try sent to its members;
        members of a try that is over ended."""
        sends: list[str] = []
        for name in effects.sends:
            spec = self.specs.get(name)
            if spec is None or not spec.members:
                sends.append(name)
            elif self._fanned(execution, name):  # recovery: the members still out, again
                sends.extend(
                    member_name(name, member)
                    for member in spec.members
                    if self._run_phase(execution, member_name(name, member)) is Phase.DISPATCHED
                )
            else:
                self._fan_out(execution, name, spec, now, effects, sends)
        effects.sends = list(dict.fromkeys(sends))
        self._end_orphans(execution, effects)
        return effects

    def _fanned(self, execution: Execution, name: str) -> bool:
        """Whether the action's current try already went to its members."""
        run = execution.actions.get(name)
        state = execution.fan_out.get(name)
        return run is not None and state is not None and state["attempt"] == run.attempt

    def _run_phase(self, execution: Execution, name: str) -> Phase | None:
        run = execution.actions.get(name)
        return None if run is None else run.phase

    def _fan_out(
        self,
        execution: Execution,
        name: str,
        spec: ActionSpec,
        now: float,
        effects: Effects,
        sends: list[str],
    ) -> None:
        run = execution.actions[name]
        execution.fan_out[name] = {"attempt": run.attempt, "members": {}}
        for member in spec.members:
            member_run = ActionRun(member_name(name, member), run.step)
            member_run.attempt = execution.attempts.get(member_run.name, 0) + 1
            execution.attempts[member_run.name] = member_run.attempt
            member_run.tries = 1
            member_run.phase = Phase.DISPATCHED
            member_run.dispatched_at = now
            execution.actions[member_run.name] = member_run
            sends.append(member_run.name)
            if spec.timeout_seconds:
                member_run.deadline = now + spec.timeout_seconds
                effects.timers.append(
                    Timer(
                        member_run.deadline, TimerKind.TIMEOUT, member_run.name, member_run.attempt
                    )
                )
        effects.changed = True

    def _member_ended(
        self,
        execution: Execution,
        run: ActionRun,
        data: Any,
        error: str | None,
        now: float,
        effects: Effects,
    ) -> Effects:
        action, member = split_member(run.name) or ("", "")
        run.phase = Phase.DONE  # done either way: the fan-out keeps how it went
        run.error = error
        state = execution.fan_out[action]
        state["members"][member] = (
            {"result": data}
            if error is None
            else {
                "error": error,
                "result": data,
            }
        )
        effects.changed = True
        verdict = self._verdict(action, state)
        if verdict is None:
            return effects
        data_out, error_out = verdict
        owner = execution.actions[action]
        inner = self.inner.on_reply(execution, action, owner.attempt, data_out, error_out, now)
        inner = self._out(execution, inner, now)
        inner.changed = True
        inner.reply = effects.reply
        inner.timers = [*effects.timers, *inner.timers]
        return inner

    def _verdict(self, action: str, state: Mapping[str, Any]) -> tuple[Any, str | None] | None:
        """The action's reply once its policy is decided: (data, error); ``None``: not yet."""
        spec = self.specs[action]
        assert spec.fan_out is not None
        members = spec.members
        outcomes: Mapping[str, Mapping[str, Any]] = state["members"]
        succeeded = [m for m in members if m in outcomes and "error" not in outcomes[m]]
        failed = [m for m in members if m in outcomes and "error" in outcomes[m]]
        needed = spec.fan_out.needed(len(members))
        if len(members) - len(failed) >= needed and len(succeeded) + len(failed) < len(members):
            return None  # still possible, and someone is still out
        data = {
            member: outcomes[member]["result"]
            if "error" not in outcomes[member]
            else {"error": outcomes[member]["error"], "data": outcomes[member]["result"]}
            for member in members
            if member in outcomes
        }
        if len(succeeded) >= needed:
            return data, None
        errors = "; ".join(f"{m}: {outcomes[m]['error']}" for m in failed)
        return data, f"{len(succeeded)} of {len(members)} succeeded, {needed} needed ({errors})"

    def _end_orphans(self, execution: Execution, effects: Effects) -> None:
        """Member runs whose action's try is over (decided, failed, cancelled, retried) end:
        no format may see a run it does not know."""
        for name, run in execution.actions.items():
            action = self._member(name)
            if action is None or not run.active:
                continue
            owner = execution.actions.get(action)
            state = execution.fan_out.get(action)
            current = (
                owner is not None
                and owner.phase is Phase.DISPATCHED
                and state is not None
                and state["attempt"] == owner.attempt
            )
            if not current:
                run.phase = Phase.DONE
                run.error = "cancelled: its fan-out was decided or ended"
                effects.changed = True
