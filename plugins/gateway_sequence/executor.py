"""The sequence semantics, as a pure function of (recipe, execution state, stimulus, time).

The rules, in the ESW sequencer's terms: blocks run in order; a ``par`` block sends all its
commands at once and is done when every one succeeded. A step that fails (an error reply, no
reply within ``timeout_seconds``, a command no driver could deliver) is tried again, up to
``max_attempts``, ``backoff_seconds`` later (a durable ``DUE`` timer; 0: at once); then
``on_error: abort`` ends the sequence (the job is aborted, the other commands of its block are
cancelled) and ``on_error: hold`` holds it (commands already out finish; the MES's Resume tries
the failed steps again). The MES's Pause lets commands out finish
and starts no new block until Resume (the end, too, waits: job control completes only a Running
job); Stop and Abort cancel what is out.

The block that runs is the one node in ``Execution.nodes`` (named as the block);
``memo["block"]`` is its index, or the next one's while the sequence is paused between two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.conditions import ConditionError, ConditionScope, assertion_error, skip_reason
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
    released,
    resend,
)
from gateway.recipes import JobCommand
from gateway_sequence.model import Block, OnError, SequenceRecipe


class SequenceExecutor:
    """``gateway.formats.Executor`` of one sequence. Cheap to build per stimulus."""

    def __init__(self, recipe: SequenceRecipe, parameters: Mapping[str, Any] | None = None) -> None:
        self.recipe = recipe
        self.parameters = parameters or {}
        self._commands = {command.name: command for command in recipe.commands()}
        self._blocks = {
            command.name: block for block in recipe.blocks for command in block.commands
        }

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        execution = Execution(scope=scope, job=job, attempts=dict(attempts or {}))
        execution.memo["block"] = 0
        effects = Effects(changed=True)
        self._advance(execution, now, effects)
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
        if error is not None:
            self._failed(
                execution,
                run,
                error if delivered else f"not delivered: {error}",
                now,
                effects,
                data,
            )
            return effects
        command = self._commands[action]
        refused = assertion_error(command.assertion, action, self._scope(execution), data)
        if refused is not None:
            self._failed(execution, run, refused, now, effects, data)
            return effects
        run.phase = Phase.DONE
        run.error = None
        execution.results[action] = data
        effects.changed = True
        self._advance(execution, now, effects)
        return effects

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        return Effects()  # every step is a command: a sequence waits for no event

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        effects = Effects()
        if timer.due > now:  # fired early by another instance's clock: set it again
            effects.timers.append(timer)
            return effects
        if timer.kind is TimerKind.DUE:  # a backoff is over: its try goes out
            if (due := released(execution, timer, now)) is not None:
                self._send(execution, due, effects, now)
            return effects
        run = answerable(execution, timer.action, timer.attempt)
        if timer.kind is TimerKind.TIMEOUT and run is not None:
            reason = f"no reply within {self._commands[run.name].timeout_seconds:g} s"
            # Offline equipment is the likely cause, not a certain one: both are said.
            self._failed(
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
                    self._send(execution, run, effects, now)
        self._advance(execution, now, effects)
        return effects

    def on_resume(self, execution: Execution, now: float) -> Effects:
        effects = resend(execution, Effects())
        self._advance(execution, now, effects)
        return effects

    # -- the rules ------------------------------------------------------------------------

    def _advance(self, execution: Execution, now: float, effects: Effects) -> None:
        """Past every block whose steps all succeeded, into the next one while running."""
        while execution.status in (Status.RUNNING, Status.PAUSED):
            index = int(execution.memo["block"])
            if index >= len(self.recipe.blocks):  # the steps after it were deleted (an edit)
                if execution.status is Status.RUNNING:
                    finish(execution, effects, "completed")
                return
            block = self.recipe.blocks[index]
            if block.name not in execution.nodes:
                if execution.status is not Status.RUNNING:
                    return
                # Then looked at again: a block whose steps were all skipped is done at once.
                self._enter(execution, block, now, effects)
                continue
            # Runs that are done leave the state with each write (the runtime keeps them in
            # the job's history): a block is done when none of its runs is left undone.
            if any(
                run.step == block.name and run.phase is not Phase.DONE
                for run in execution.actions.values()
            ):
                return
            if index + 1 == len(self.recipe.blocks):
                if execution.status is Status.RUNNING:
                    finish(execution, effects, "completed")
                return
            del execution.nodes[block.name]
            execution.memo["block"] = index + 1
            execution.memo.pop("block_try", None)
            effects.changed = True

    def _enter(
        self,
        execution: Execution,
        block: Block,
        now: float,
        effects: Effects,
        *,
        send_at: float | None = None,
    ) -> None:
        """``send_at``: when its commands go out (a block run again after its backoff)."""
        execution.nodes[block.name] = NodeRun(block.name, now, branch=block.parallel)
        if block.max_attempts > 1:  # which run of the block this is (it may be run again)
            execution.memo["block_try"] = execution.memo.get("block_try", 0) + 1
        for command in block.commands:
            run = execution.actions[command.name] = ActionRun(command.name, block.name)
            try:
                skipped = skip_reason(command.condition, self._scope(execution))
            except ConditionError as error:  # the recipe reads what is not there: no try helps
                text = command.condition.text if command.condition else ""
                self._failed(execution, run, f"condition {text!r}: {error.reason}", now, effects)
            else:
                if skipped is not None:
                    # Nothing sent: done, with why (``tries`` 0: nothing to undo either).
                    run.phase = Phase.DONE
                    run.error = skipped
                    effects.changed = True
                elif send_at is not None and send_at > now:
                    defer(run, send_at, effects)
                else:
                    self._send(execution, run, effects, now)
            if execution.status is Status.FINISHING:
                return

    def _scope(self, execution: Execution) -> ConditionScope:
        return ConditionScope(results=execution.results, parameters=self.parameters)

    def _send(self, execution: Execution, run: ActionRun, effects: Effects, now: float) -> None:
        command = self._commands[run.name]
        timeout, side_effects = command.timeout_seconds, command.side_effects
        dispatch(execution, run, now, effects, timeout=timeout, side_effects=side_effects)

    def _failed(
        self,
        execution: Execution,
        run: ActionRun,
        reason: str,
        now: float,
        effects: Effects,
        data: Any = None,
    ) -> None:
        """A try failed: tried again (after its backoff) while it has tries left, unless it
        was never sent (a condition that cannot be decided: no try helps)."""
        command = self._commands[run.name]
        run.error = reason
        effects.changed = True
        if 0 < run.tries < command.max_attempts:
            if command.backoff_seconds:
                defer(run, now + command.backoff_seconds, effects)
            else:
                self._send(execution, run, effects, now)
            return
        if data is not None:  # what the equipment read when it failed, beside the error
            execution.results[run.name] = data
        if command.continue_on_error:  # its error stays with it; the sequence goes on
            run.phase = Phase.DONE
            self._advance(execution, now, effects)
            return
        run.phase = Phase.FAILED
        block = self._blocks[run.name]
        if execution.memo.get("block_try", 1) < block.max_attempts:
            self._retry_block(execution, block, now, effects)
            return
        message = f"step {run.name}: {reason}"
        if command.on_error is OnError.ABORT:
            execution.failed_action = run.name
            finish(execution, effects, "aborted", message)
        elif execution.status is not Status.HELD:
            execution.status = Status.HELD
            execution.error = message
            execution.failed_action = run.name
            effects.report = Report.HOLD
        # Already held: Resume retries this step with the one that held the sequence.

    def _retry_block(
        self, execution: Execution, block: Block, now: float, effects: Effects
    ) -> None:
        """Run the whole par block again: what is still out is cancelled (its late replies
        match no try), every command is sent afresh (new correlation ids) once the block's
        backoff has passed."""
        for command in block.commands:
            run = execution.actions.get(command.name)
            if run is not None and run.active:
                run.phase = Phase.CANCELLED
            execution.results.pop(command.name, None)
        del execution.nodes[block.name]
        self._enter(execution, block, now, effects, send_at=now + block.backoff_seconds)
