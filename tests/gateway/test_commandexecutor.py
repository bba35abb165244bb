"""``gateway.commandexecutor``: the stimuli of an executor of commands, its rules given."""

from __future__ import annotations

from typing import Any

from gateway.commandexecutor import CommandExecutor
from gateway.formats import (
    ActionRun,
    ActionSpec,
    Effects,
    Execution,
    Phase,
    Report,
    Status,
    Timer,
    TimerKind,
    finish,
)
from gateway.recipes import JobCommand

T0 = 1000.0


class OneCommand(CommandExecutor):
    """Sends ``press`` once; a refused reply is one without ``ok``; a failure holds."""

    def __init__(self, spec: ActionSpec) -> None:
        self.press = spec

    def spec(self, action: str) -> ActionSpec:
        return self.press

    def memo(self) -> dict[str, Any]:
        return {"sent": False}

    def advance(self, execution: Execution, now: float, effects: Effects) -> None:
        if execution.status is not Status.RUNNING:
            return
        if not execution.memo["sent"]:
            execution.memo["sent"] = True
            run = execution.actions["press"] = ActionRun("press", "press")
            self.send(execution, run, now, effects)
        elif execution.actions["press"].phase is Phase.DONE:
            finish(execution, effects, "completed")

    def refused(self, execution: Execution, run: ActionRun, data: Any) -> str | None:
        return None if isinstance(data, dict) and data.get("ok") else "not ok"

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
        if not self.retry(execution, run, now, effects):
            run.phase = Phase.FAILED
            execution.status, execution.error = Status.HELD, reason
            effects.report = Report.HOLD


def started(**spec: Any) -> tuple[OneCommand, Execution]:
    executor = OneCommand(ActionSpec("press", "p.v1", timeout_seconds=5.0, **spec))
    execution, effects = executor.start("cell1", "J1", T0, {"press": 3})
    assert effects.sends == ["press"]
    assert effects.timers == [Timer(T0 + 5, TimerKind.TIMEOUT, "press", 4)]
    assert execution.memo == {"sent": True}
    return executor, execution


def test_a_reply_completes_its_try_and_the_rules_advance() -> None:
    executor, execution = started()
    assert executor.on_reply(execution, "press", 3, {"ok": 1}, None, T0 + 1) == Effects()  # old
    effects = executor.on_reply(execution, "press", 4, {"ok": 1}, None, T0 + 2)
    assert (effects.reply, effects.report) == ((2.0, False), Report.COMPLETE)
    assert execution.results == {"press": {"ok": 1}}
    assert executor.on_reply(execution, "press", 4, {"ok": 1}, None, T0 + 3) == Effects()


def test_an_error_a_refusal_and_an_undelivered_command_fail_the_try() -> None:
    for data, error, delivered, reason in [
        ({"ok": 0}, None, True, "not ok"),
        ({"torque": 1}, "jammed", True, "jammed"),
        (None, "no driver", False, "not delivered: no driver"),
    ]:
        executor, execution = started()
        effects = executor.on_reply(execution, "press", 4, data, error, T0 + 1, delivered=delivered)
        assert (execution.status, execution.error, effects.report) == (
            Status.HELD,
            reason,
            Report.HOLD,
        )


def test_a_failed_try_goes_again_at_once_or_after_its_backoff_on_a_durable_timer() -> None:
    executor, execution = started(max_attempts=3, backoff_seconds=2.0)
    effects = executor.on_reply(execution, "press", 4, None, "jammed", T0 + 1)
    assert (effects.sends, effects.timers) == ([], [Timer(T0 + 3, TimerKind.DUE, "press")])
    early = executor.on_timer(execution, Timer(T0 + 3, TimerKind.DUE, "press"), T0 + 2.5)
    assert early == Effects(timers=[Timer(T0 + 3, TimerKind.DUE, "press")])  # set again
    effects = executor.on_timer(execution, Timer(T0 + 3, TimerKind.DUE, "press"), T0 + 3)
    assert effects.sends == ["press"]
    assert execution.actions["press"].attempt == 5
    executor, execution = started(max_attempts=2)
    assert executor.on_reply(execution, "press", 4, None, "jammed", T0 + 1).sends == ["press"]


def test_no_reply_in_time_fails_the_try_saying_so_and_why_the_equipment_may_not_answer() -> None:
    executor, execution = started()
    executor.on_timer(execution, Timer(T0 + 5, TimerKind.TIMEOUT, "press", 4), T0 + 5, "offline")
    assert execution.error == "offline (no reply within 5 s)"
    executor, execution = started()
    executor.on_reply(execution, "press", 4, {"ok": 1}, None, T0 + 1)
    late = executor.on_timer(execution, Timer(T0 + 5, TimerKind.TIMEOUT, "press", 4), T0 + 5)
    assert late == Effects()  # answered in time


def test_a_held_job_resumed_tries_its_failed_actions_again_and_recovery_resends() -> None:
    executor, execution = started()
    executor.on_reply(execution, "press", 4, {"ok": 0}, None, T0 + 1)
    execution.results["press"] = {"ok": 0}
    effects = executor.on_command(execution, JobCommand.RESUME, T0 + 2)
    assert (execution.status, execution.error, effects.sends) == (Status.RUNNING, None, ["press"])
    assert execution.results == {}  # the retry's result replaces it
    assert executor.on_resume(execution, T0 + 3).sends == ["press"]
    assert executor.on_event(execution, "press", {}, T0 + 3) == Effects()
