"""The cycle semantics: a pure function of (program, execution state, stimulus, time).

One command is out at a time (its node is named as it; ``memo["position"]`` counts the commands
done over all cycles). A reply sends the next one, the first again after the last until
``cycles`` are done; an error reply, no reply in time or an undeliverable command aborts the job.
Pause lets the command out finish and sends none until Resume; Stop and Abort cancel it.
Replies, timers and the MES's commands are taken as every format of commands takes them
(``gateway.commandexecutor``): this module says only what is the cycle's own.
"""

from __future__ import annotations

from typing import Any

from gateway.commandexecutor import CommandExecutor
from gateway.formats import (
    ActionRun,
    ActionSpec,
    Effects,
    Execution,
    NodeRun,
    Phase,
    Status,
    finish,
)


class CycleExecutor(CommandExecutor):
    """``gateway.formats.Executor`` of ``commands`` run ``cycles`` times."""

    def __init__(self, commands: tuple[ActionSpec, ...], cycles: int) -> None:
        self.commands, self.cycles = commands, cycles
        self._specs = {command.name: command for command in commands}

    def spec(self, action: str) -> ActionSpec:
        return self._specs[action]

    def memo(self) -> dict[str, Any]:
        return {"position": 0}

    def advance(self, execution: Execution, now: float, effects: Effects) -> None:
        """Send the next command if none is out and the job runs; complete after the last."""
        if execution.status is not Status.RUNNING or execution.nodes:
            return
        commands, position = self.commands, execution.memo["position"]
        if position == len(commands) * self.cycles:
            finish(execution, effects, "completed")
            return
        command = commands[position % len(commands)]
        # A fresh activation each cycle; ``dispatch`` numbers the tries over the job (and runs).
        execution.nodes[command.name] = NodeRun(command.name, now)
        run = execution.actions[command.name] = ActionRun(command.name, command.name)
        self.send(execution, run, now, effects)

    def completed(
        self, execution: Execution, run: ActionRun, data: Any, now: float, effects: Effects
    ) -> None:
        del execution.nodes[run.name]
        execution.memo["position"] += 1
        super().completed(execution, run, data, now, effects)  # the last cycle's result stands

    def failed(
        self,
        execution: Execution,
        run: ActionRun,
        reason: str,
        now: float,
        effects: Effects,
        data: Any = None,
    ) -> None:
        run.phase, run.error = Phase.FAILED, reason
        execution.failed_action = run.name
        finish(execution, effects, "aborted", f"{run.name}: {reason}")
