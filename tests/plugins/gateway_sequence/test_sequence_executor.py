"""The pure sequence executor: each stimulus, its change and its effects (no I/O, injected time).

The same rules run through the runtime on real Redis and mosquitto in
``test_sequence_runtime.py``; here each one is shown alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import (
    ActionRun,
    Effects,
    ExecutorOptions,
    Phase,
    Report,
    Status,
    Timer,
    TimerKind,
)
from gateway.recipes import JobCommand
from gateway_runtime import dump_execution, load_execution, take_done
from gateway_sequence.format import SequenceFormat

T0 = 1000.0


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5, **fields}


RECIPE = {"steps": [step("a"), {"name": "both", "par": [step("b"), step("c")]}, step("d")]}


class Job:
    """One job's sequence under test: apply stimuli as the runtime would, look at the state."""

    def __init__(self, recipe: dict[str, Any] = RECIPE, attempts: dict[str, int] | None = None):
        program = SequenceFormat().compile(recipe)
        self.executor = program.executor({}, ExecutorOptions())
        self.now = T0
        self.execution, self.effects = self.executor.start("cell1", "J1", T0, attempts)
        self.history: dict[str, ActionRun] = {}
        self.sent = list(self.effects.sends)
        self._committed()

    def _committed(self) -> None:
        # As every commit of the runtime does: runs that are done leave the state for the
        # job's history.
        self.history.update(take_done(self.execution))

    def _record(self, effects: Effects) -> Effects:
        self._committed()
        self.effects = effects
        self.sent.extend(effects.sends)
        return effects

    def run(self, action: str) -> ActionRun:
        return self.execution.actions.get(action) or self.history[action]

    def reply(self, action: str, data: Any = None, error: str | None = None, **kw: Any) -> Effects:
        attempt = self.run(action).attempt
        return self._record(
            self.executor.on_reply(
                self.execution, action, attempt, data or {action: 1}, error, self.now, **kw
            )
        )

    def timeout(self, action: str, offline: str | None = None) -> Effects:
        run = self.run(action)
        assert run.deadline is not None
        self.now = run.deadline
        timer = Timer(run.deadline, TimerKind.TIMEOUT, action, run.attempt)
        return self._record(self.executor.on_timer(self.execution, timer, self.now, offline))

    def command(self, command: JobCommand) -> Effects:
        return self._record(self.executor.on_command(self.execution, command, self.now))

    @property
    def status(self) -> Status:
        return self.execution.status

    @property
    def block(self) -> list[str]:
        return list(self.execution.nodes)


def test_blocks_run_in_order_and_a_par_block_sends_all_its_commands_at_once() -> None:
    job = Job()
    assert (job.effects.sends, job.block) == (["a"], ["a"])
    assert job.effects.timers == [Timer(T0 + 5, TimerKind.TIMEOUT, "a", 1)]
    effects = job.reply("a")
    assert effects.sends == ["b", "c"]
    assert job.block == ["both"]
    assert job.execution.nodes["both"].branch
    assert {job.run(n).step for n in "bc"} == {"both"}
    assert effects.timers == [
        Timer(T0 + 5, TimerKind.TIMEOUT, "b", 1),
        Timer(T0 + 5, TimerKind.TIMEOUT, "c", 1),
    ]
    assert job.reply("c").sends == []  # b is still out: the block waits for it
    assert job.reply("b").sends == ["d"]
    assert job.reply("d").report is Report.COMPLETE
    assert (job.status, job.execution.outcome, job.block) == (Status.FINISHING, "completed", [])
    assert job.execution.results == {"a": {"a": 1}, "b": {"b": 1}, "c": {"c": 1}, "d": {"d": 1}}
    assert job.execution.side_effects
    assert job.sent == ["a", "b", "c", "d"]


def test_a_reply_reports_its_latency_for_the_metrics() -> None:
    job = Job()
    job.now = T0 + 0.25
    assert job.reply("a").reply == (0.25, False)


def test_a_late_or_repeated_reply_or_timeout_changes_nothing() -> None:
    job = Job()
    job.reply("a")
    ex = job.executor
    assert ex.on_reply(job.execution, "a", 1, {"again": True}, None, T0) == Effects()
    assert ex.on_reply(job.execution, "b", 7, {}, None, T0) == Effects()  # no such try
    late = Timer(T0 + 5, TimerKind.TIMEOUT, "a", 1)  # answered before
    assert ex.on_timer(job.execution, late, T0 + 5) == Effects()


def test_a_timer_fired_early_by_another_clock_is_set_again() -> None:
    job = Job()
    early = Timer(T0 + 5, TimerKind.TIMEOUT, "a", 1)
    effects = job.executor.on_timer(job.execution, early, T0 + 4)
    assert (effects.timers, effects.changed) == ([early], False)


def test_a_failure_is_tried_again_up_to_max_attempts_then_aborts_with_its_block() -> None:
    job = Job({"steps": [step("a"), {"par": [step("b", max_attempts=2), step("c")]}]})
    job.reply("a")
    effects = job.reply("b", None, "jammed")
    assert effects.sends == ["b"]
    assert (job.run("b").attempt, job.run("b").tries, job.run("b").error) == (2, 2, "jammed")
    effects = job.timeout("b")
    assert effects.report is Report.ABORT
    assert (job.status, job.execution.outcome) == (Status.FINISHING, "aborted")
    assert job.execution.error == "step b: no reply within 5 s"
    assert (job.execution.failed_action, job.run("b").phase) == ("b", Phase.FAILED)
    assert job.run("c").phase is Phase.CANCELLED  # its reply now changes nothing
    assert job.reply("c") == Effects()


def test_tries_are_numbered_on_from_an_earlier_run_of_the_job_id() -> None:
    job = Job(attempts={"a": 3})
    assert job.run("a").attempt == 4


def test_a_failed_reply_keeps_what_the_equipment_read_once_no_try_is_left() -> None:
    job = Job({"steps": [step("a", max_attempts=2)]})
    job.reply("a", {"torque": 12.0}, "torque low")
    assert job.execution.results == {}  # tried again: not a result yet
    job.reply("a", {"torque": 13.5}, "torque low")
    assert job.execution.results == {"a": {"torque": 13.5}}
    assert job.execution.error == "step a: torque low"


def test_a_timeout_says_why_when_the_equipment_is_known_offline() -> None:
    job = Job()
    job.timeout("a", offline="equipment x offline: never seen")
    assert job.execution.error == "step a: equipment x offline: never seen (no reply within 5 s)"


def test_an_undelivered_command_fails_its_try_saying_so() -> None:
    job = Job()
    job.reply("a", None, "no driver serves it", delivered=False)
    assert job.execution.error == "step a: not delivered: no driver serves it"


def test_hold_lets_the_block_finish_and_resume_tries_the_failed_steps_again() -> None:
    job = Job({"steps": [{"par": [step("b", on_error="hold"), step("c")]}, step("d")]})
    effects = job.reply("b", {"torque": 3}, "torque not reached")
    assert effects.report is Report.HOLD
    assert (job.status, job.execution.error) == (Status.HELD, "step b: torque not reached")
    assert (job.execution.failed_action, job.execution.results) == ("b", {"b": {"torque": 3}})
    assert job.reply("c").changed  # what was out finishes while held
    assert (job.status, job.sent) == (Status.HELD, ["b", "c"])  # and nothing new starts
    job.now += 60
    effects = job.command(JobCommand.RESUME)
    assert effects.sends == ["b"]
    assert (job.status, job.execution.error, job.execution.failed_action) == (
        Status.RUNNING,
        None,
        None,
    )
    assert (job.run("b").attempt, job.run("b").tries, job.run("b").dispatched_at) == (2, 1, T0 + 60)
    assert "b" not in job.execution.results  # the retry's result replaces the failed one
    assert job.reply("b").sends == ["d"]
    assert job.reply("d").report is Report.COMPLETE


def test_a_second_step_failing_while_held_is_retried_on_the_same_resume() -> None:
    job = Job({"on_error": "hold", "steps": [{"par": [step("b"), step("c")]}]})
    assert job.reply("b", None, "jammed").report is Report.HOLD
    assert job.timeout("c").report is None  # held already: reported once
    assert job.execution.error == "step b: jammed"
    assert sorted(job.command(JobCommand.RESUME).sends) == ["b", "c"]


def test_pause_lets_commands_out_finish_and_starts_no_block_until_resume() -> None:
    job = Job()
    assert job.command(JobCommand.PAUSE).changed
    assert job.status is Status.PAUSED
    assert job.reply("a").sends == []  # a is done, b and c wait
    assert (job.block, job.execution.memo) == ([], {"block": 1})
    assert job.command(JobCommand.PAUSE) == Effects()
    assert job.command(JobCommand.RESUME).sends == ["b", "c"]
    assert job.block == ["both"]


def test_the_last_block_done_while_paused_completes_on_resume() -> None:
    job = Job({"steps": [step("a")]})
    job.command(JobCommand.PAUSE)
    assert job.reply("a").report is None  # job control completes a Running job only
    assert job.command(JobCommand.RESUME).report is Report.COMPLETE
    assert job.execution.outcome == "completed"


def test_a_command_after_the_end_reports_again_a_completion_the_mes_pause_held_back() -> None:
    job = Job({"steps": [step("a")]})
    job.reply("a")
    assert job.status is Status.FINISHING
    assert job.command(JobCommand.PAUSE) == Effects()
    assert job.command(JobCommand.RESUME).report is Report.COMPLETE


@pytest.mark.parametrize(
    ("command", "outcome"),
    [(JobCommand.STOP, "stopped"), (JobCommand.ABORT, "aborted by the MES")],
)
def test_stop_and_abort_cancel_what_is_out_and_record_the_results(
    command: JobCommand, outcome: str
) -> None:
    job = Job()
    job.reply("a")
    effects = job.command(command)
    assert effects.report is Report.RECORD
    assert (job.status, job.execution.outcome, job.execution.error) == (
        Status.FINISHING,
        outcome,
        None,
    )
    assert [job.run(n).phase for n in "abc"] == [Phase.DONE, Phase.CANCELLED, Phase.CANCELLED]
    assert not job.command(command).changed  # once (a repeat only reports again)
    assert job.execution.results == {"a": {"a": 1}}


def test_abort_of_a_held_sequence_records_the_results_so_far() -> None:
    job = Job({"on_error": "hold", "steps": [step("a"), step("b"), step("c")]})
    job.reply("a")
    job.reply("b", None, "jammed")
    assert job.command(JobCommand.ABORT).report is Report.RECORD
    assert job.sent == ["a", "b"]  # c never went out


def test_recovery_sends_again_what_waits_for_a_reply() -> None:
    job = Job()
    job.reply("a")
    effects = job.executor.on_resume(job.execution, T0 + 1)
    assert (effects.sends, effects.changed) == (["b", "c"], False)
    job.reply("b")
    job.reply("c")
    job.command(JobCommand.STOP)
    assert job.executor.on_resume(job.execution, T0 + 2) == Effects()


def test_a_step_without_side_effects_does_not_mark_the_execution() -> None:
    job = Job({"steps": [step("look", side_effects=False)]})
    assert not job.execution.side_effects


def test_the_state_is_json_and_another_instance_continues_from_its_stored_form() -> None:
    job = Job()
    job.reply("a")
    copy = load_execution(dump_execution(job.execution))
    assert copy == job.execution
    assert job.executor.on_reply(copy, "b", 1, {}, None, T0).changed
