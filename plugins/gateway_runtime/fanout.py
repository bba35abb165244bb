"""Fan-out for every format: one action's command (or pipeline) to each member of a set.

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

A **per-member pipeline** (``ActionSpec.pipeline``) is a fan-out whose members each run a list
of steps on their own: member ``nr2`` may be on its third step while ``nr4`` is still on its
first, and a member whose step failed (after that step's tries, each further one after its
``backoff_seconds`` on a durable ``DUE`` timer) stops only its own pipeline. Each step of each
member is a run ``<step>@<member>``; the action's result is, per member, the
results of its steps by name.
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


def _steps(spec: ActionSpec) -> tuple[ActionSpec, ...]:
    """What each member runs: the pipeline's steps, or the action's own command once (its
    ``max_attempts`` reruns the whole fan-out, through the format's rules)."""
    return spec.pipeline or (replace(spec, max_attempts=1),)


def member_spec(program: Program, name: str) -> ActionSpec | None:
    """The spec of a member run (``tighten@nr2``, a pipeline's ``lift@slot3``): its step's,
    sent to that member."""
    parts = split_member(name)
    if parts is None:
        return None
    base, member = parts
    for spec in program.actions.values():
        if member not in spec.members:
            continue
        for step in _steps(spec):
            if step.name == base:
                return replace(step, name=name, equipment=member, fan_out=None, members=())
    return None


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
        # step name -> (fan-out action, the step's index in what each member runs)
        self._owners: dict[str, tuple[str, int]] = {
            step.name: (name, index)
            for name, spec in program.actions.items()
            if spec.members
            for index, step in enumerate(_steps(spec))
        }

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
        if self._locate(action) is None:
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
        return self._member_answered(execution, run, data, error, now, effects)

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        return self._out(execution, self.inner.on_event(execution, action, data, now), now)

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        located = self._locate(timer.action)
        if located is None:
            effects = self.inner.on_timer(execution, timer, now, offline)
            return self._out(execution, effects, now)
        effects = Effects()
        if timer.due > now:  # fired early by another instance's clock: set it again
            effects.timers.append(timer)
            return effects
        run = execution.actions.get(timer.action)
        current = run is not None and run.attempt == timer.attempt
        if timer.kind is TimerKind.DUE and run is not None and current:
            if run.phase is Phase.PENDING:  # a pipeline step's backoff is over: its next try
                _, member, step, _ = located
                self._send(
                    execution, step, member, run.step, now, effects, effects.sends, again=True
                )
            return effects
        out = current and run is not None and run.phase is Phase.DISPATCHED
        if timer.kind is not TimerKind.TIMEOUT or run is None or not out:
            return effects
        step = located[2]
        reason = f"no reply within {step.timeout_seconds or 0:g} s"
        reason = f"{offline} ({reason})" if offline else reason
        return self._member_answered(execution, run, None, reason, now, effects)

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        return self._out(execution, self.inner.on_command(execution, command, now), now)

    def on_resume(self, execution: Execution, now: float) -> Effects:
        return self._out(execution, self.inner.on_resume(execution, now), now)

    # -- the members --------------------------------------------------------------------------

    def _locate(self, name: str) -> tuple[str, str, ActionSpec, int] | None:
        """(fan-out action, member, step, its index) of a member run; ``None``: not one."""
        parts = split_member(name)
        if parts is None or parts[0] not in self._owners:
            return None
        action, index = self._owners[parts[0]]
        spec = self.specs[action]
        if parts[1] not in spec.members:
            return None
        return action, parts[1], _steps(spec)[index], index

    def _out(self, execution: Execution, effects: Effects, now: float) -> Effects:
        """The inner executor's effects with each fan-out action's try sent to its members;
        members of a try that is over ended."""
        sends: list[str] = []
        for name in effects.sends:
            spec = self.specs.get(name)
            if spec is None or not spec.members:
                sends.append(name)
            elif self._fanned(execution, name):  # recovery: the members' steps still out
                state = execution.fan_out[name]["members"]
                for member, progress in state.items():
                    step = _steps(spec)[min(progress["step"], len(_steps(spec)) - 1)]
                    run_name = member_name(step.name, member)
                    if self._run_phase(execution, run_name) is Phase.DISPATCHED:
                        sends.append(run_name)
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
        members = {member: {"step": 0, "results": {}} for member in spec.members}
        execution.fan_out[name] = {"attempt": run.attempt, "members": members}
        first = _steps(spec)[0]
        for member in spec.members:
            self._send(execution, first, member, run.step, now, effects, sends)
        effects.changed = True

    def _send(
        self,
        execution: Execution,
        step: ActionSpec,
        member: str,
        node: str,
        now: float,
        effects: Effects,
        sends: list[str],
        *,
        again: bool = False,
    ) -> None:
        """Send ``step`` to ``member`` (``again``: its next try, else its first)."""
        name = member_name(step.name, member)
        run = execution.actions.get(name) if again else None
        if run is None:
            run = execution.actions[name] = ActionRun(name, node)
        run.attempt = execution.attempts.get(name, 0) + 1
        execution.attempts[name] = run.attempt
        run.tries += 1
        run.phase = Phase.DISPATCHED
        run.dispatched_at = now
        run.deadline = now + step.timeout_seconds if step.timeout_seconds else None
        sends.append(name)
        if run.deadline is not None:
            effects.timers.append(Timer(run.deadline, TimerKind.TIMEOUT, name, run.attempt))
        effects.changed = True

    def _member_answered(
        self,
        execution: Execution,
        run: ActionRun,
        data: Any,
        error: str | None,
        now: float,
        effects: Effects,
    ) -> Effects:
        located = self._locate(run.name)
        assert located is not None
        action, member, step, index = located
        progress = execution.fan_out[action]["members"][member]
        steps = _steps(self.specs[action])
        effects.changed = True
        if error is not None and run.tries < step.max_attempts:
            run.error = error
            if step.backoff_seconds > 0:  # its next try waits on a durable timer
                run.phase = Phase.PENDING
                run.not_before, run.deadline = now + step.backoff_seconds, None
                effects.timers.append(Timer(run.not_before, TimerKind.DUE, run.name, run.attempt))
            else:
                self._send(
                    execution, step, member, run.step, now, effects, effects.sends, again=True
                )
            return effects
        run.phase = Phase.DONE  # done either way: the fan-out keeps how it went
        run.error = error
        if error is not None:
            progress["error"] = f"{step.name}: {error}" if self.specs[action].pipeline else error
            progress["data"] = data
        else:
            progress["results"][step.name] = data
            progress["step"] = index + 1
            if index + 1 < len(steps):  # this member's pipeline goes on, on its own
                self._send(
                    execution, steps[index + 1], member, run.step, now, effects, effects.sends
                )
                return effects
            progress["ok"] = True
        verdict = self._verdict(action, execution.fan_out[action]["members"])
        if verdict is None:
            return effects
        data_out, error_out = verdict
        owner = execution.actions[action]
        inner = self.inner.on_reply(execution, action, owner.attempt, data_out, error_out, now)
        inner = self._out(execution, inner, now)
        inner.changed = True
        inner.reply = effects.reply
        inner.sends = [*effects.sends, *inner.sends]
        inner.timers = [*effects.timers, *inner.timers]
        return inner

    def _verdict(
        self, action: str, outcomes: Mapping[str, Mapping[str, Any]]
    ) -> tuple[Any, str | None] | None:
        """The action's reply once its policy is decided: (data, error); ``None``: not yet."""
        spec = self.specs[action]
        assert spec.fan_out is not None
        members = spec.members
        succeeded = [m for m in members if outcomes[m].get("ok")]
        failed = [m for m in members if "error" in outcomes[m]]
        needed = spec.fan_out.needed(len(members))
        if len(members) - len(failed) >= needed and len(succeeded) + len(failed) < len(members):
            return None  # still possible, and someone is still out
        data = {
            member: self._member_result(spec, outcomes[member])
            for member in members
            if member in succeeded or member in failed
        }
        if len(succeeded) >= needed:
            return data, None
        errors = "; ".join(f"{m}: {outcomes[m]['error']}" for m in failed)
        return data, f"{len(succeeded)} of {len(members)} succeeded, {needed} needed ({errors})"

    @staticmethod
    def _member_result(spec: ActionSpec, outcome: Mapping[str, Any]) -> Any:
        """One member's entry of the action's result."""
        results = outcome["results"]
        if "error" in outcome:
            failed = {"error": outcome["error"], "data": outcome["data"]}
            return {**failed, "results": results} if spec.pipeline else failed
        return results if spec.pipeline else results[spec.name]

    def _end_orphans(self, execution: Execution, effects: Effects) -> None:
        """Member runs whose action's try is over (decided, failed, cancelled, retried) end:
        no format may see a run it does not know."""
        for name, run in execution.actions.items():
            located = self._locate(name)
            if located is None or not run.active:
                continue
            action = located[0]
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
