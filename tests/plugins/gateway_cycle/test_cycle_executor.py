"""The example format's pure executor: each stimulus, its change and effects (injected time)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import Effects, ExecutorOptions, Phase, Report, Status, Timer, TimerKind
from gateway.recipes import JobCommand
from gateway_cycle.format import CycleFormat
from gateway_runtime import dump_execution, load_execution, take_done

T0 = 1000.0


def command(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5, **fields}


class Job:
    """A job of a cycle recipe, its state stored and read back after every stimulus (as the
    runtime does: JSON, the runs that are done moved out to the history)."""

    def __init__(self, recipe: dict[str, Any], attempts: dict[str, int] | None = None) -> None:
        self.executor = CycleFormat().compile(recipe).executor({}, ExecutorOptions())
        self.execution, self.effects = self.executor.start("cell1", "J1", T0, attempts)
        self.sent = [
            f"{name}:{self.execution.actions[name].attempt}" for name in self.effects.sends
        ]
        self._store()

    def _store(self) -> None:
        take_done(self.execution)
        self.execution = load_execution(dump_execution(self.execution))

    def _record(self, effects: Effects) -> Effects:
        self._store()
        self.effects = effects
        self.sent += [f"{n}:{self.execution.actions[n].attempt}" for n in effects.sends]
        return effects

    def reply(self, name: str, data: Any = None, error: str | None = None, **kw: Any) -> Effects:
        attempt = self.execution.actions[name].attempt
        now = T0 + 1
        on_reply = self.executor.on_reply
        return self._record(on_reply(self.execution, name, attempt, data, error, now, **kw))

    def timer(self, name: str, attempt: int, now: float, offline: str | None = None) -> Effects:
        timer = Timer(T0 + 5, TimerKind.TIMEOUT, name, attempt)
        return self._record(self.executor.on_timer(self.execution, timer, now, offline))

    def command(self, command: JobCommand) -> Effects:
        return self._record(self.executor.on_command(self.execution, command, T0 + 2))


def test_commands_run_one_after_the_other_cycles_times_each_cycle_a_new_try() -> None:
    job = Job({"cycles": 2, "commands": [command("a"), command("b")]})
    assert job.effects.timers == [Timer(T0 + 5, TimerKind.TIMEOUT, "a", 1)]
    assert list(job.execution.nodes) == ["a"]
    for name, data in [("a", 1), ("b", 2), ("a", 3)]:
        assert job.reply(name, data).report is None
    assert job.reply("b", 4).report is Report.COMPLETE
    assert job.sent == ["a:1", "b:1", "a:2", "b:2"]
    assert job.execution.results == {"a": 3, "b": 4}  # the last cycle's
    assert (job.execution.status, job.execution.outcome) == (Status.FINISHING, "completed")
    assert job.execution.side_effects


def test_a_reply_reports_its_latency() -> None:
    assert Job({"commands": [command("a")]}).reply("a", 1).reply == (1.0, False)


def test_tries_are_numbered_on_from_an_earlier_run_of_the_job_id() -> None:
    assert Job({"commands": [command("a")]}, attempts={"a": 4}).sent == ["a:5"]


@pytest.mark.parametrize(
    ("fail", "error"),
    [
        (lambda job: job.reply("a", {"torque": 3}, "torque low"), "a: torque low"),
        (
            lambda job: job.reply("a", None, "no driver", delivered=False),
            "a: not delivered: no driver",
        ),
        (lambda job: job.timer("a", 1, T0 + 5), "a: no reply within 5 s"),
        (
            lambda job: job.timer("a", 1, T0 + 5, "equipment x offline"),
            "a: equipment x offline (no reply within 5 s)",
        ),
    ],
)
def test_a_failed_command_aborts_the_job_saying_why(fail: Any, error: str) -> None:
    job = Job({"commands": [command("a"), command("b")]})
    assert fail(job).report is Report.ABORT
    assert (job.execution.outcome, job.execution.error) == ("aborted", error)
    assert (job.execution.failed_action, job.execution.actions["a"].phase) == ("a", Phase.FAILED)
    assert job.sent == ["a:1"]


def test_a_late_repeated_or_early_stimulus_changes_nothing() -> None:
    job = Job({"commands": [command("a"), command("b")]})
    assert job.timer("a", 1, T0 + 4).timers == [Timer(T0 + 5, TimerKind.TIMEOUT, "a", 1)]
    job.reply("a", 1)
    ex = job.executor
    assert ex.on_reply(job.execution, "a", 1, 1, None, T0) == Effects()  # answered already
    assert ex.on_reply(job.execution, "b", 9, 1, None, T0) == Effects()  # no such try
    assert job.timer("a", 1, T0 + 5) == Effects()
    assert ex.on_event(job.execution, "b", {}, T0) == Effects()


def test_pause_lets_the_command_out_finish_and_sends_no_new_one_until_resume() -> None:
    job = Job({"commands": [command("a"), command("b")]})
    assert job.command(JobCommand.PAUSE).changed
    assert job.reply("a", 1).sends == []
    assert job.execution.status is Status.PAUSED
    assert job.command(JobCommand.PAUSE) == Effects()
    assert job.command(JobCommand.RESUME).sends == ["b"]
    job.command(JobCommand.PAUSE)
    assert job.reply("b", 2).report is None  # the end, too, waits: job control completes
    assert job.command(JobCommand.RESUME).report is Report.COMPLETE  # a Running job only


def test_a_completion_is_reported_again_on_the_mes_next_command() -> None:
    job = Job({"commands": [command("a")]})
    job.reply("a", 1)
    assert job.command(JobCommand.RESUME).report is Report.COMPLETE


@pytest.mark.parametrize(
    ("method", "outcome"), [(JobCommand.STOP, "stopped"), (JobCommand.ABORT, "aborted by the MES")]
)
def test_stop_and_abort_cancel_what_is_out_and_keep_the_results(
    method: JobCommand, outcome: str
) -> None:
    job = Job({"commands": [command("a"), command("b")]})
    job.reply("a", 1)
    assert job.command(method).report is Report.RECORD
    assert (job.execution.outcome, job.execution.results) == (outcome, {"a": 1})
    assert job.execution.actions["b"].phase is Phase.CANCELLED
    assert job.reply("b", 2) == Effects()


def test_recovery_sends_again_the_command_out() -> None:
    job = Job({"commands": [command("a")]})
    effects = job.executor.on_resume(job.execution, T0 + 3)
    assert (effects.sends, effects.changed) == (["a"], False)
    job.command(JobCommand.STOP)
    assert job.executor.on_resume(job.execution, T0 + 3) == Effects()
