"""The pure sequence executor: each stimulus, its change and its effects (no I/O, no clock)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.recipes import JobCommand
from gateway_sequence.executor import Report, Sequencer, Timer
from gateway_sequence.model import load_sequence
from gateway_sequence.state import Outcome, Phase, Run, Status, dump_run, load_run

T0 = 1000.0


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5, **fields}


RECIPE = {"steps": [step("a"), {"name": "both", "par": [step("b"), step("c")]}, step("d")]}


def started(recipe: dict[str, Any] = RECIPE) -> tuple[Sequencer, Run]:
    sequencer = Sequencer(load_sequence(recipe))
    run = Run("cell1", "J1", recipe, {}, Status.STARTING, started_at=T0)
    first = [command.name for command in sequencer.recipe.blocks[0].commands]
    assert sequencer.begin(run, T0).sends == first
    return sequencer, run


def ok(sequencer: Sequencer, run: Run, name: str, data: Any = None, now: float = T0) -> Any:
    return sequencer.on_reply(run, name, run.steps[name].attempt, data or {name: 1}, None, now)


def test_blocks_run_in_order_and_a_par_block_sends_all_its_commands_at_once() -> None:
    sequencer, run = started()
    assert run.status is Status.RUNNING
    effects = ok(sequencer, run, "a")
    assert effects.sends == ["b", "c"]
    assert effects.timers == [Timer(T0 + 5, "b", 1), Timer(T0 + 5, "c", 1)]
    assert ok(sequencer, run, "c").sends == []  # b is still out: the block waits for it
    effects = ok(sequencer, run, "b")
    assert effects.sends == ["d"]
    effects = ok(sequencer, run, "d")
    assert effects.report is Report.FINAL
    assert (run.status, run.outcome) == (Status.FINISHING, Outcome.COMPLETED)
    assert run.results == {"a": {"a": 1}, "b": {"b": 1}, "c": {"c": 1}, "d": {"d": 1}}
    assert run.side_effects


def test_a_late_or_repeated_reply_changes_nothing() -> None:
    sequencer, run = started()
    ok(sequencer, run, "a")
    before = dump_run(run)
    assert not sequencer.on_reply(run, "a", 1, {"again": True}, None, T0).changed
    assert not sequencer.on_reply(run, "b", 7, {}, None, T0).changed  # no such try
    assert not sequencer.on_timeout(run, "a", 1, T0 + 10).changed  # answered before
    assert dump_run(run) == before


def test_a_failure_is_tried_again_up_to_max_attempts_then_aborts_with_the_block() -> None:
    sequencer, run = started(
        {"steps": [step("a"), {"par": [step("b", max_attempts=2), step("c")]}]}
    )
    ok(sequencer, run, "a")
    effects = sequencer.on_reply(run, "b", 1, None, "jammed", T0 + 1)
    assert effects.sends == ["b"]
    assert (run.steps["b"].attempt, run.steps["b"].tries) == (2, 2)
    effects = sequencer.on_timeout(run, "b", 2, T0 + 7)
    assert effects.report is Report.FINAL
    assert (run.status, run.outcome) == (Status.FINISHING, Outcome.FAILED)
    assert run.error == "step b: no reply within 5 s"
    assert run.failed_command == "J1:b:2"
    assert run.steps["c"].phase is Phase.CANCELLED  # its reply now changes nothing
    assert not ok(sequencer, run, "c").changed


def test_a_failed_reply_keeps_what_the_equipment_read_once_no_try_is_left() -> None:
    sequencer, run = started({"steps": [step("a", max_attempts=2)]})
    sequencer.on_reply(run, "a", 1, {"torque": 12.0}, "torque low", T0)
    assert run.results == {}  # tried again: not a result yet
    sequencer.on_reply(run, "a", 2, {"torque": 13.5}, "torque low", T0)
    assert run.results == {"a": {"torque": 13.5}}
    assert run.error == "step a: torque low"


def test_a_timeout_says_why_when_the_equipment_is_known_offline() -> None:
    sequencer, run = started()
    sequencer.on_timeout(run, "a", 1, T0 + 5, "equipment x offline: never seen")
    assert run.error == "step a: equipment x offline: never seen"


def test_an_undelivered_command_fails_its_try_saying_so() -> None:
    sequencer, run = started()
    sequencer.on_reply(run, "a", 1, None, "no driver serves it", T0, delivered=False)
    assert run.error == "step a: not delivered: no driver serves it"


def test_hold_lets_the_block_finish_and_resume_tries_the_failed_step_again() -> None:
    sequencer, run = started({"steps": [{"par": [step("b", on_error="hold"), step("c")]}]})
    effects = sequencer.on_reply(run, "b", 1, None, "torque not reached", T0)
    assert effects.report is Report.HOLD
    assert (run.status, run.error) == (Status.HELD, "step b: torque not reached")
    assert ok(sequencer, run, "c").changed  # what was out finishes while held
    assert run.status is Status.HELD
    effects = sequencer.on_command(run, JobCommand.RESUME, T0 + 60)
    assert effects.sends == ["b"]
    assert (run.status, run.error, run.steps["b"].attempt) == (Status.RUNNING, None, 2)
    assert ok(sequencer, run, "b").report is Report.FINAL
    assert run.outcome is Outcome.COMPLETED


def test_pause_lets_commands_out_finish_and_starts_no_block_until_resume() -> None:
    sequencer, run = started()
    assert sequencer.on_command(run, JobCommand.PAUSE, T0).changed
    assert ok(sequencer, run, "a").sends == []  # a is done, b and c wait
    assert (run.position, run.entered) == (1, False)
    assert not sequencer.on_command(run, JobCommand.PAUSE, T0).changed
    assert sequencer.on_command(run, JobCommand.RESUME, T0 + 1).sends == ["b", "c"]


def test_the_last_block_done_while_paused_completes_on_resume() -> None:
    sequencer, run = started({"steps": [step("a")]})
    sequencer.on_command(run, JobCommand.PAUSE, T0)
    assert ok(sequencer, run, "a").report is None  # job control completes a Running job only
    assert sequencer.on_command(run, JobCommand.RESUME, T0).report is Report.FINAL
    assert run.outcome is Outcome.COMPLETED


@pytest.mark.parametrize(
    ("command", "outcome"),
    [(JobCommand.STOP, Outcome.STOPPED), (JobCommand.ABORT, Outcome.ABORTED)],
)
def test_stop_and_abort_cancel_what_is_out_and_report_the_results(
    command: JobCommand, outcome: Outcome
) -> None:
    sequencer, run = started()
    ok(sequencer, run, "a")
    effects = sequencer.on_command(run, command, T0)
    assert effects.report is Report.FINAL
    assert (run.status, run.outcome) == (Status.FINISHING, outcome)
    assert {s.name: s.phase for s in run.steps.values()} == {
        "a": Phase.DONE,
        "b": Phase.CANCELLED,
        "c": Phase.CANCELLED,
    }
    assert not sequencer.on_command(run, command, T0).changed  # once
    assert run.results == {"a": {"a": 1}}


def test_a_run_survives_its_stored_form() -> None:
    sequencer, run = started()
    ok(sequencer, run, "a")
    copy = load_run(dump_run(run))
    assert copy == run
    assert ok(sequencer, copy, "b").changed  # another instance continues from the copy


def test_a_step_without_side_effects_does_not_mark_the_run() -> None:
    sequencer = Sequencer(load_sequence({"steps": [step("look", side_effects=False)]}))
    run = Run("cell1", "J1", {}, {}, Status.STARTING, started_at=T0)
    sequencer.begin(run, T0)
    assert not run.side_effects
