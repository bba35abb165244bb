"""The stimuli of an executor whose every action is a command, as every such format takes them.

A format whose actions all send a command and wait for its reply (no equipment events: the
sequence and cycle formats) subclasses ``CommandExecutor`` and writes only its own rules:

- ``spec(action)``: the action's ``ActionSpec`` (its timeout, tries, backoff, side effects);
- ``advance(execution, now, effects)``: go on as far as it can (send what is next, end);
- ``failed(execution, run, reason, now, effects, data)``: a try failed (an error reply, one
  not delivered, no reply in time, one ``refused``); ``retry`` tries it again if it may;
- optionally ``completed`` (a try succeeded: by default its result is kept), ``refused`` (a
  reply the format does not take, e.g. an assertion) and ``memo`` (the first ``Execution.memo``).

The rules of ``docs/recipe-formats.md`` are kept here: a late, repeated or cancelled reply or
timer changes nothing (rule 2), a timer fired early is set again (5), the MES's commands
(``gateway.formats.mes_command``; a held job resumed tries its failed actions again, 7),
recovery sends again what is out (8).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from gateway.formats import (
    ActionRun,
    ActionSpec,
    Effects,
    Execution,
    Phase,
    Timer,
    TimerKind,
    answerable,
    defer,
    dispatch,
    mes_command,
    released,
    resend,
)
from gateway.recipes import JobCommand


class CommandExecutor(ABC):
    """``gateway.formats.Executor`` of commands; a subclass says what its rules are."""

    @abstractmethod
    def spec(self, action: str) -> ActionSpec: ...

    @abstractmethod
    def advance(self, execution: Execution, now: float, effects: Effects) -> None: ...

    @abstractmethod
    def failed(
        self,
        execution: Execution,
        run: ActionRun,
        reason: str,
        now: float,
        effects: Effects,
        data: Any = None,
    ) -> None: ...

    def memo(self) -> dict[str, Any]:
        """The format's own state of a new job (``Execution.memo``)."""
        return {}

    def refused(self, execution: Execution, run: ActionRun, data: Any) -> str | None:
        """Why a reply without error fails its try all the same (``None``: it does not)."""
        return None

    def completed(
        self, execution: Execution, run: ActionRun, data: Any, now: float, effects: Effects
    ) -> None:
        """A try succeeded: its reply's data is the action's result; then ``advance``."""
        run.phase = Phase.DONE
        run.error = None
        execution.results[run.name] = data
        effects.changed = True
        self.advance(execution, now, effects)

    # -- the stimuli ------------------------------------------------------------------------

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        execution = Execution(scope, job, attempts=dict(attempts or {}), memo=self.memo())
        effects = Effects(changed=True)
        self.advance(execution, now, effects)
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
        effects = Effects()
        run = answerable(execution, action, attempt)
        if run is None:
            return effects  # late, repeated or cancelled: changes nothing
        if run.dispatched_at is not None:
            effects.reply = (now - run.dispatched_at, error is not None)
        reason: str | None = error if delivered else f"not delivered: {error}"
        if error is None:
            reason = self.refused(execution, run, data)
        if reason is None:
            self.completed(execution, run, data, now, effects)
        else:
            self.failed(execution, run, reason, now, effects, data)
        return effects

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        return Effects()  # every action is a command: no event is awaited

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        effects = Effects()
        if timer.due > now:  # fired early by another instance's clock: set it again
            effects.timers.append(timer)
            return effects
        if timer.kind is TimerKind.DUE:  # a wait is over (``retry``): its try goes out
            if (due := released(execution, timer, now)) is not None:
                self.send(execution, due, now, effects)
            return effects
        run = answerable(execution, timer.action, timer.attempt)
        if timer.kind is TimerKind.TIMEOUT and run is not None:
            reason = f"no reply within {self.spec(run.name).timeout_seconds:g} s"
            # Offline equipment is the likely cause, not a certain one: both are said.
            self.failed(
                execution, run, f"{offline} ({reason})" if offline else reason, now, effects
            )
        return effects

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        effects = Effects()
        if mes_command(execution, command, effects):  # resumed from held: the failed again
            for run in list(execution.actions.values()):
                if run.phase is Phase.FAILED:
                    run.tries = 0
                    execution.results.pop(run.name, None)  # the retry's result replaces it
                    self.send(execution, run, now, effects)
        self.advance(execution, now, effects)
        return effects

    def on_resume(self, execution: Execution, now: float) -> Effects:
        effects = resend(execution, Effects())
        self.advance(execution, now, effects)
        return effects

    # -- for the rules ----------------------------------------------------------------------

    def send(self, execution: Execution, run: ActionRun, now: float, effects: Effects) -> None:
        """The next try of ``run`` goes out now (``gateway.formats.dispatch``)."""
        spec = self.spec(run.name)
        timeout, side_effects = spec.timeout_seconds, spec.side_effects
        dispatch(execution, run, now, effects, timeout=timeout, side_effects=side_effects)

    def retry(self, execution: Execution, run: ActionRun, now: float, effects: Effects) -> bool:
        """Try a failed try's action again while it has tries left (``max_attempts``), after
        its ``backoff_seconds`` (a durable timer); ``False``: none left, or it was never sent
        (a condition that cannot be decided: no try helps)."""
        spec = self.spec(run.name)
        if not 0 < run.tries < spec.max_attempts:
            return False
        if spec.backoff_seconds:
            defer(run, now + spec.backoff_seconds, effects)
        else:
            self.send(execution, run, now, effects)
        return True
