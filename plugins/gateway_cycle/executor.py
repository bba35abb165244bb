"""The cycle semantics: a pure function of (program, execution state, stimulus, time).

One command is out at a time (its node is named as it; ``memo["position"]`` counts the commands
done over all cycles). A reply sends the next one, the first again after the last until
``cycles`` are done; an error reply, no reply in time or an undeliverable command aborts the job.
Pause lets the command out finish and sends none until Resume; Stop and Abort cancel it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.formats import (
    ActionRun,
    ActionSpec,
    Effects,
    Execution,
    NodeRun,
    Phase,
    Status,
    Timer,
    TimerKind,
    answerable,
    dispatch,
    finish,
    mes_command,
    resend,
)
from gateway.recipes import JobCommand


class CycleExecutor:
    """``gateway.formats.Executor`` of ``commands`` run ``cycles`` times."""

    def __init__(self, commands: tuple[ActionSpec, ...], cycles: int) -> None:
        self.commands, self.cycles = commands, cycles

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        execution = Execution(scope, job, attempts=dict(attempts or {}), memo={"position": 0})
        return execution, self._next(execution, now, Effects(changed=True))

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
        run = answerable(execution, action, attempt)
        if run is None:
            return Effects()  # late, repeated or cancelled: changes nothing
        effects = Effects(changed=True, reply=(now - (run.dispatched_at or now), error is not None))
        if error is not None:
            reason = error if delivered else f"not delivered: {error}"
            return self._fail(execution, run, reason, effects)
        run.phase = Phase.DONE
        execution.results[action] = data  # the last cycle's stands
        del execution.nodes[action]
        execution.memo["position"] += 1
        return self._next(execution, now, effects)

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        return Effects()  # every action is a command: no event is awaited

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        if timer.due > now:  # fired early by another instance's clock: set it again
            return Effects(timers=[timer])
        run = answerable(execution, timer.action, timer.attempt)
        if timer.kind is not TimerKind.TIMEOUT or run is None:
            return Effects()  # answered in time
        reason = f"no reply within {timer.due - (run.dispatched_at or 0):g} s"
        return self._fail(execution, run, f"{offline} ({reason})" if offline else reason, Effects())

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        # Pause, Resume, Stop and Abort as every format takes them (a cycle never holds).
        effects = Effects()
        mes_command(execution, command, effects)
        return self._next(execution, now, effects)

    def on_resume(self, execution: Execution, now: float) -> Effects:
        # Recovery: the command out is sent again.
        return self._next(execution, now, resend(execution, Effects()))

    def _next(self, execution: Execution, now: float, effects: Effects) -> Effects:
        """Send the next command if none is out and the job runs; complete after the last."""
        if execution.status is not Status.RUNNING or execution.nodes:
            return effects
        commands, position = self.commands, execution.memo["position"]
        if position == len(commands) * self.cycles:
            return finish(execution, effects, "completed")
        command = commands[position % len(commands)]
        # A fresh activation each cycle; ``dispatch`` numbers the tries over the job (and runs).
        execution.nodes[command.name] = NodeRun(command.name, now)
        run = execution.actions[command.name] = ActionRun(command.name, command.name)
        return dispatch(execution, run, now, effects, timeout=command.timeout_seconds)

    def _fail(self, execution: Execution, run: ActionRun, reason: str, effects: Effects) -> Effects:
        run.phase, run.error = Phase.FAILED, reason
        execution.failed_action = run.name
        return finish(execution, effects, "aborted", f"{run.name}: {reason}")
