"""The sequence executor: what each stimulus does to a run. Pure: no I/O, no clock.

Every method changes the ``Run`` it is given and returns the ``Effects`` to carry out after the
change is stored: commands to send, timeouts to set, a report due to job control. A stimulus
that does not apply (a late reply, a timeout of a try that was answered, a command in a state
it means nothing in) changes nothing, so any instance may apply any stimulus, any number of
times.

The rules, in the ESW sequencer's terms: blocks run in order; a ``par`` block sends all its
commands at once and is done when every one succeeded. A step that fails (an error reply, no
reply within ``timeout_seconds``, a command no driver could deliver) is tried again up to
``max_attempts``; then ``on_error: abort`` ends the sequence (the job is aborted, the other
commands of its block are cancelled) and ``on_error: hold`` holds it (the job goes to
Interrupted.Held, commands already out finish; the MES's Resume tries the failed steps again,
its Abort ends the job). The MES's Pause lets commands out finish and starts no new block until
Resume; Stop and Abort cancel what is out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.recipes import JobCommand
from gateway_sequence.model import Block, Command, OnError, SequenceRecipe
from gateway_sequence.state import Outcome, Phase, Run, Status, StepRun

ACTIVE = (Status.RUNNING, Status.PAUSED, Status.HELD)


class Report(StrEnum):
    """What job control must hear after the change is stored."""

    HOLD = "hold"  # the job goes to Interrupted.Held
    FINAL = "final"  # the sequence ended: complete, abort, or record the results


@dataclass(frozen=True)
class Timer:
    """The timeout of one try: due at ``due`` (Unix time) unless answered before."""

    due: float
    step: str
    attempt: int


@dataclass
class Effects:
    changed: bool = False
    sends: list[str] = field(default_factory=list)  # steps whose latest try goes out
    timers: list[Timer] = field(default_factory=list)
    report: Report | None = None


class Sequencer:
    """Applies stimuli to the runs of one recipe."""

    def __init__(self, recipe: SequenceRecipe) -> None:
        self.recipe = recipe

    def begin(self, run: Run, now: float) -> Effects:
        """The job is Running: send the first block."""
        effects = Effects()
        if run.status is Status.STARTING:
            run.status = Status.RUNNING
            self._enter(run, now, effects)
        return effects

    def on_reply(
        self,
        run: Run,
        step: str,
        attempt: int,
        data: Any,
        error: str | None,
        now: float,
        *,
        delivered: bool = True,
    ) -> Effects:
        """The equipment answered try ``attempt`` of ``step`` (``delivered`` false: the command
        never left, ``error`` says why)."""
        effects = Effects()
        current = self._current_try(run, step, attempt)
        if current is None:
            return effects  # late, repeated or cancelled: changes nothing
        if error is None:
            current.phase = Phase.DONE
            run.results[step] = data
            effects.changed = True
            self._advance(run, now, effects)
        else:
            reason = error if delivered else f"not delivered: {error}"
            self._failed(run, self.recipe.command(step), reason, now, effects, data)
        return effects

    def on_timeout(
        self, run: Run, step: str, attempt: int, now: float, offline: str | None = None
    ) -> Effects:
        """No reply to try ``attempt`` of ``step`` in time (``offline``: why the equipment is
        unreachable, when it is known to be)."""
        effects = Effects()
        current = self._current_try(run, step, attempt)
        if current is None:
            return effects
        command = self.recipe.command(step)
        reason = offline or f"no reply within {command.timeout_seconds:g} s"
        self._failed(run, command, reason, now, effects)
        return effects

    def on_command(self, run: Run, command: JobCommand, now: float) -> Effects:
        """The MES's Pause, Resume, Stop or Abort (the job's state is already changed)."""
        effects = Effects()
        if command is JobCommand.PAUSE and run.status is Status.RUNNING:
            run.status = Status.PAUSED
            effects.changed = True
        elif command is JobCommand.RESUME and run.status is Status.PAUSED:
            run.status = Status.RUNNING
            effects.changed = True
            self._advance(run, now, effects)
        elif command is JobCommand.RESUME and run.status is Status.HELD:
            self._retry_failed(run, now, effects)
        elif command in (JobCommand.STOP, JobCommand.ABORT) and (
            run.status in ACTIVE or run.status is Status.STARTING
        ):
            outcome = Outcome.STOPPED if command is JobCommand.STOP else Outcome.ABORTED
            self._finish(run, outcome, None, effects)
        elif run.status is Status.FINISHING and command is not JobCommand.PAUSE:
            # Its completion may wait for this (the MES paused the job as the sequence ended:
            # ``report_completed``): report again.
            effects.report = Report.FINAL
        return effects

    # -- the rules ------------------------------------------------------------------------

    def _current_try(self, run: Run, step: str, attempt: int) -> StepRun | None:
        current = run.steps.get(step)
        if current is None or current.attempt != attempt or current.phase is not Phase.SENT:
            return None
        if run.status not in ACTIVE:
            return None
        return current

    def _block(self, run: Run) -> Block:
        return self.recipe.blocks[run.position]

    def _enter(self, run: Run, now: float, effects: Effects) -> None:
        run.entered = True
        effects.changed = True
        for command in self._block(run).commands:
            self._send(run, command, 1, now, effects)

    def _send(self, run: Run, command: Command, tries: int, now: float, effects: Effects) -> None:
        previous = run.steps.get(command.name)
        last = previous.attempt if previous is not None else run.earlier_attempts.get(command.name)
        attempt = (last or 0) + 1
        deadline = now + command.timeout_seconds
        run.steps[command.name] = StepRun(command.name, attempt, tries, Phase.SENT, now, deadline)
        run.side_effects = run.side_effects or command.side_effects
        effects.sends.append(command.name)
        effects.timers.append(Timer(deadline, command.name, attempt))
        effects.changed = True

    def _advance(self, run: Run, now: float, effects: Effects) -> None:
        """Past every block whose steps all succeeded; into the next one while running (paused,
        the sequence waits at the block boundary; its end, too, waits for Resume: job control
        completes only a Running job)."""
        while run.status in (Status.RUNNING, Status.PAUSED):
            if not run.entered:
                if run.status is Status.RUNNING:
                    self._enter(run, now, effects)
                return
            block = self._block(run)
            if any(run.steps[c.name].phase is not Phase.DONE for c in block.commands):
                return
            if run.position + 1 == len(self.recipe.blocks):
                if run.status is Status.RUNNING:
                    self._finish(run, Outcome.COMPLETED, None, effects)
                return
            run.position += 1
            run.entered = False
            effects.changed = True

    def _failed(
        self,
        run: Run,
        command: Command,
        reason: str,
        now: float,
        effects: Effects,
        data: Any = None,
    ) -> None:
        current = run.steps[command.name]
        current.error = reason
        effects.changed = True
        if current.tries < command.max_attempts:
            self._send(run, command, current.tries + 1, now, effects)
            return
        current.phase = Phase.FAILED
        if data is not None:  # what the equipment read when it failed, beside the error
            run.results[command.name] = data
        message = f"step {command.name}: {reason}"
        if command.on_error is OnError.ABORT:
            run.failed_command = run.correlation_id(command.name)
            self._finish(run, Outcome.FAILED, message, effects)
        elif run.status is not Status.HELD:
            run.status = Status.HELD
            run.error = message
            run.failed_command = run.correlation_id(command.name)
            run.hold_reported = False
            effects.report = Report.HOLD
        # Already held: Resume retries this step with the one that held the sequence.

    def _retry_failed(self, run: Run, now: float, effects: Effects) -> None:
        run.status = Status.RUNNING
        run.error = run.failed_command = None
        run.hold_reported = False
        effects.changed = True
        for command in self._block(run).commands:
            if run.steps[command.name].phase is Phase.FAILED:
                self._send(run, command, 1, now, effects)
        self._advance(run, now, effects)

    def _finish(self, run: Run, outcome: Outcome, error: str | None, effects: Effects) -> None:
        for step in run.steps.values():
            if step.phase is Phase.SENT:
                step.phase = Phase.CANCELLED
        run.status = Status.FINISHING
        run.outcome = outcome
        run.error = error
        effects.changed = True
        effects.report = Report.FINAL
