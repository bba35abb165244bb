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
The stimuli are taken as every format of commands takes them (``gateway.commandexecutor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.commandexecutor import CommandExecutor
from gateway.conditions import ConditionError, ConditionScope, assertion_error, skip_reason
from gateway.formats import (
    ActionRun,
    Effects,
    Execution,
    NodeRun,
    Phase,
    Report,
    Status,
    defer,
    finish,
)
from gateway_sequence.model import Block, Command, OnError, SequenceRecipe


class SequenceExecutor(CommandExecutor):
    """``gateway.formats.Executor`` of one sequence. Cheap to build per stimulus."""

    def __init__(self, recipe: SequenceRecipe, parameters: Mapping[str, Any] | None = None) -> None:
        self.recipe = recipe
        self.parameters = parameters or {}
        self._commands = {command.name: command for command in recipe.commands()}
        self._blocks = {
            command.name: block for block in recipe.blocks for command in block.commands
        }

    def spec(self, action: str) -> Command:
        return self._commands[action]

    def memo(self) -> dict[str, Any]:
        return {"block": 0}

    def refused(self, execution: Execution, run: ActionRun, data: Any) -> str | None:
        assertion = self._commands[run.name].assertion
        return assertion_error(assertion, run.name, self._scope(execution), data)

    def advance(self, execution: Execution, now: float, effects: Effects) -> None:
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
                self.failed(execution, run, f"condition {text!r}: {error.reason}", now, effects)
            else:
                if skipped is not None:
                    # Nothing sent: done, with why (``tries`` 0: nothing to undo either).
                    run.phase = Phase.DONE
                    run.error = skipped
                    effects.changed = True
                elif send_at is not None and send_at > now:
                    defer(run, send_at, effects)
                else:
                    self.send(execution, run, now, effects)
            if execution.status is Status.FINISHING:
                return

    def _scope(self, execution: Execution) -> ConditionScope:
        return ConditionScope(results=execution.results, parameters=self.parameters)

    def failed(
        self,
        execution: Execution,
        run: ActionRun,
        reason: str,
        now: float,
        effects: Effects,
        data: Any = None,
    ) -> None:
        run.error = reason
        effects.changed = True
        if self.retry(execution, run, now, effects):
            return
        command = self._commands[run.name]
        if data is not None:  # what the equipment read when it failed, beside the error
            execution.results[run.name] = data
        if command.continue_on_error:  # its error stays with it; the sequence goes on
            run.phase = Phase.DONE
            self.advance(execution, now, effects)
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
