"""The rollback of a failed job, as a pure function of state and stimulus (injected time).

``CompensatingExecutor`` wraps any format's executor; the sequence format drives it here. After
every stimulus the state goes through what a commit does (runs that are done leave it, JSON
round trip), so a rule that reads a finished run or keeps something that is not JSON fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import (
    ActionRun,
    Effects,
    Execution,
    Executor,
    ExecutorOptions,
    Report,
    Status,
    Timer,
    TimerKind,
)
from gateway.recipes import JobCommand
from gateway_runtime import dump_execution, load_execution, take_done
from gateway_runtime.compensation import ROLLBACK_NODE, CompensatingExecutor, compensating
from gateway_sequence.format import SequenceFormat

T0 = 1000.0


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5, **fields}


def undo(action: str, **fields: Any) -> dict[str, Any]:
    return {"type_id": f"com.example.un{action}.v1", "timeout_seconds": 2, **fields}


CLAMP_TIGHTEN = {
    "steps": [
        step("position", side_effects=False),
        step("clamp", compensation=undo("clamp", name="unclamp")),
        {
            "name": "lift",
            "par": [
                step("lift_a", compensation=undo("lift_a")),
                step("lift_b", compensation=undo("lift_b")),
            ],
        },
        step("tighten"),
    ]
}


class Job:
    def __init__(self, recipe: dict[str, Any] = CLAMP_TIGHTEN) -> None:
        program = SequenceFormat().compile(recipe)
        self.executor: Executor = compensating(program.executor({}, ExecutorOptions()), program)
        self.now = T0
        self.execution, self.effects = self.executor.start("cell1", "J1", T0)
        self.history: dict[str, ActionRun] = {}
        self.sent = list(self.effects.sends)
        self._commit()

    def _commit(self) -> None:
        self.history.update(take_done(self.execution))
        self.execution = load_execution(dump_execution(self.execution))

    def _record(self, effects: Effects) -> Effects:
        self._commit()
        self.effects = effects
        self.sent.extend(effects.sends)
        return effects

    def run(self, action: str) -> ActionRun:
        return self.execution.actions.get(action) or self.history[action]

    def reply(self, action: str, error: str | None = None) -> Effects:
        run = self.run(action)
        return self._record(
            self.executor.on_reply(
                self.execution, action, run.attempt, {action: 1}, error, self.now
            )
        )

    def timeout(self, action: str) -> Effects:
        run = self.run(action)
        assert run.deadline is not None
        self.now = run.deadline
        timer = Timer(run.deadline, TimerKind.TIMEOUT, action, run.attempt)
        return self._record(self.executor.on_timer(self.execution, timer, self.now))

    def command(self, command: JobCommand) -> Effects:
        return self._record(self.executor.on_command(self.execution, command, self.now))

    def through_lift(self) -> None:
        for action in ("position", "clamp"):
            self.reply(action)
        self.reply("lift_a")
        self.reply("lift_b")


def rollback(execution: Execution) -> Any:
    assert execution.rollback is not None
    return execution.rollback


def test_a_program_without_compensations_keeps_its_own_executor() -> None:
    program = SequenceFormat().compile({"steps": [step("a")]})
    executor = program.executor({}, ExecutorOptions())
    assert compensating(executor, program) is executor


def test_a_failure_undoes_what_completed_last_first_then_reports_it_safe() -> None:
    job = Job()
    assert isinstance(job.executor, CompensatingExecutor)
    job.through_lift()
    effects = job.reply("tighten", error="torque not reached")
    # The end is held back: the par block's two are undone at once, first.
    assert effects.report is None
    assert job.execution.status is Status.COMPENSATING
    assert sorted(effects.sends) == ["lift_a.undo", "lift_b.undo"]
    assert ROLLBACK_NODE in job.execution.nodes
    assert job.reply("lift_b.undo").sends == []  # its partner is still out
    assert job.reply("lift_a.undo").sends == ["unclamp"]
    effects = job.reply("unclamp")
    assert effects.report is Report.ABORT
    execution = job.execution
    assert execution.status is Status.FINISHING
    assert execution.outcome == "aborted"
    assert execution.side_effects is False  # FAILED_SAFE
    assert rollback(execution).safe is True
    assert execution.error == "step tighten: torque not reached"
    assert [entry["compensation"] for entry in rollback(execution).ran] == [
        "lift_b.undo",
        "lift_a.undo",
        "unclamp",
    ]
    assert {entry["outcome"] for entry in rollback(execution).ran} == {"done"}
    assert not execution.nodes
    # A repeated reply, or the MES's commands now, change nothing of the rollback.
    assert job.reply("unclamp") == Effects()


def test_a_failed_compensation_stops_the_rollback_and_reports_it_unsafe() -> None:
    job = Job()
    job.through_lift()
    job.reply("tighten", error="torque not reached")
    job.reply("lift_a.undo")
    job.reply("lift_b.undo")
    effects = job.timeout("unclamp")
    assert effects.report is Report.ABORT
    execution = job.execution
    assert execution.side_effects is True
    assert rollback(execution).safe is False
    assert rollback(execution).ran[-1] == {
        "action": "clamp",
        "compensation": "unclamp",
        "outcome": "failed",
        "error": "no reply within 2 s",
    }
    assert execution.error == (
        "step tighten: torque not reached; rollback failed: unclamp: no reply within 2 s"
    )


def test_the_compensations_before_a_failed_one_are_not_run() -> None:
    job = Job()
    job.through_lift()
    job.reply("tighten", error="torque not reached")
    job.reply("lift_a.undo", error="stuck")
    effects = job.reply("lift_b.undo")
    assert effects.sends == []
    assert effects.report is Report.ABORT
    assert [(e["compensation"], e["outcome"]) for e in rollback(job.execution).ran] == [
        ("lift_a.undo", "failed"),
        ("lift_b.undo", "done"),
        ("unclamp", "not run"),
    ]


def test_a_compensation_is_tried_max_attempts_times() -> None:
    recipe = {"steps": [step("clamp", compensation=undo("clamp", max_attempts=2)), step("b")]}
    job = Job(recipe)
    job.reply("clamp")
    job.reply("b", error="broken")
    first = job.run("clamp.undo").attempt
    effects = job.reply("clamp.undo", error="busy")
    assert effects.sends == ["clamp.undo"]
    assert job.run("clamp.undo").attempt == first + 1
    assert job.reply("clamp.undo").report is Report.ABORT
    assert rollback(job.execution).safe is True


def test_something_done_that_nothing_undoes_leaves_the_failure_unsafe() -> None:
    recipe = {"steps": [step("mark"), step("clamp", compensation=undo("clamp")), step("b")]}
    job = Job(recipe)
    job.reply("mark")
    job.reply("clamp")
    job.reply("b", error="broken")
    effects = job.reply("clamp.undo")
    assert effects.report is Report.ABORT
    assert job.execution.side_effects is True
    assert rollback(job.execution).safe is False


def test_a_failure_before_anything_compensable_completed_ends_at_once() -> None:
    job = Job()
    job.reply("position")
    effects = job.reply("clamp", error="no part")
    assert effects.report is Report.ABORT
    assert rollback(job.execution).ran == []
    assert rollback(job.execution).safe is True
    assert job.execution.side_effects is False


def test_the_mes_abort_is_compensated_and_only_recorded() -> None:
    job = Job()
    job.reply("position")
    job.reply("clamp")
    effects = job.command(JobCommand.ABORT)
    assert effects.sends == ["unclamp"]
    assert effects.report is None
    assert job.reply("unclamp").report is Report.RECORD
    assert job.execution.outcome == "aborted by the MES"


def test_a_stop_is_not_compensated() -> None:
    job = Job()
    job.reply("position")
    job.reply("clamp")
    effects = job.command(JobCommand.STOP)
    assert effects.report is Report.RECORD
    assert job.execution.rollback is None


@pytest.mark.parametrize("command", [JobCommand.PAUSE, JobCommand.RESUME])
def test_pause_and_resume_do_not_interrupt_a_rollback(command: JobCommand) -> None:
    job = Job()
    job.reply("position")
    job.reply("clamp")
    job.reply("lift_a", error="jammed")
    assert job.command(command) == Effects()
    assert job.execution.status is Status.COMPENSATING


def test_the_mes_abort_during_a_rollback_makes_its_end_a_record() -> None:
    job = Job()
    job.reply("position")
    job.reply("clamp")
    job.reply("lift_a", error="jammed")
    assert job.command(JobCommand.ABORT).changed
    assert job.reply("unclamp").report is Report.RECORD


def test_recovery_sends_the_compensations_out_again() -> None:
    job = Job()
    job.reply("position")
    job.reply("clamp")
    job.reply("lift_a", error="jammed")
    attempt = job.run("unclamp").attempt
    effects = job._record(job.executor.on_resume(job.execution, job.now))
    assert effects.sends == ["unclamp"]
    assert job.run("unclamp").attempt == attempt
    timer = Timer(job.now + 60, TimerKind.TIMEOUT, "unclamp", attempt)
    assert job.executor.on_timer(job.execution, timer, job.now).timers == [timer]  # early
