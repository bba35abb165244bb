"""The rules every executor shares, as ``gateway.formats`` carries them out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.conditions import (
    Condition,
    ConditionError,
    ConditionScope,
    assertion_error,
    parse_condition,
    skip_reason,
)
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
    answerable,
    bound,
    defer,
    dispatch,
    mes_command,
    released,
    resend,
)
from gateway.recipes import JobCommand


def test_a_try_is_numbered_over_the_job_and_times_out() -> None:
    execution = Execution("cell1", "J1", attempts={"clamp": 2})  # an earlier run's tries
    run = ActionRun("clamp", "Clamp", not_before=5.0)
    effects = dispatch(execution, run, 10.0, Effects(), timeout=3, side_effects=False)
    assert (run.attempt, run.tries, run.phase, run.deadline) == (3, 1, Phase.DISPATCHED, 13.0)
    assert run.not_before is None
    assert execution.attempts == {"clamp": 3}
    assert effects.sends == ["clamp"]
    assert effects.timers == [Timer(13.0, TimerKind.TIMEOUT, "clamp", 3)]
    assert effects.changed
    assert not execution.side_effects
    dispatch(execution, run, 20.0, effects, timeout=3)
    assert (run.attempt, run.tries) == (4, 2)
    assert execution.side_effects


def test_an_awaited_event_sends_nothing_and_without_a_timeout_sets_no_timer() -> None:
    execution = Execution("cell1", "J1")
    run = ActionRun("scan", "Scan")
    effects = dispatch(execution, run, 1.0, Effects(), timeout=None, command=False)
    assert (run.phase, run.attempt, run.deadline) == (Phase.WAITING, 1, None)
    assert (effects.sends, effects.timers) == ([], [])


def test_only_the_current_try_out_is_answerable() -> None:
    execution = Execution("cell1", "J1")
    run = execution.actions["clamp"] = ActionRun("clamp", "Clamp")
    dispatch(execution, run, 1.0, Effects(), timeout=None)
    assert answerable(execution, "clamp", 1) is run
    assert answerable(execution, "clamp", 2) is None  # no such try (yet)
    assert answerable(execution, "other", 1) is None
    execution.status = Status.HELD  # a held job's other tries still finish
    assert answerable(execution, "clamp", 1) is run
    execution.status = Status.FINISHING
    assert answerable(execution, "clamp", 1) is None
    execution.status, run.phase = Status.RUNNING, Phase.DONE
    assert answerable(execution, "clamp", 1) is None  # answered already


def test_a_deferred_try_waits_on_a_durable_timer_until_it_is_released() -> None:
    execution = Execution("cell1", "J1")
    run = execution.actions["clamp"] = ActionRun("clamp", "Clamp", phase=Phase.DISPATCHED)
    run.deadline = 9.0  # a try out: its wait ends now
    effects = defer(run, 5.0, Effects())
    assert (run.phase, run.not_before) == (Phase.PENDING, 5.0)
    assert not run.deadline
    assert (effects.timers, effects.changed) == ([Timer(5.0, TimerKind.DUE, "clamp")], True)
    assert released(execution, Timer(5.0, TimerKind.DUE, "clamp"), 5.0) is run
    defer(run, 8.0, Effects())  # waits again: the earlier timer releases nothing
    assert released(execution, Timer(5.0, TimerKind.DUE, "clamp"), 5.0) is None
    assert released(execution, Timer(8.0, TimerKind.DUE, "clamp"), 8.0) is run
    execution.status = Status.FINISHING
    assert released(execution, Timer(8.0, TimerKind.DUE, "clamp"), 8.0) is None


@pytest.mark.parametrize(
    ("status", "command", "after", "held", "report"),
    [
        (Status.RUNNING, JobCommand.PAUSE, Status.PAUSED, False, None),
        (Status.PAUSED, JobCommand.PAUSE, Status.PAUSED, False, None),
        (Status.PAUSED, JobCommand.RESUME, Status.RUNNING, False, None),
        (Status.HELD, JobCommand.RESUME, Status.RUNNING, True, None),
        (Status.HELD, JobCommand.PAUSE, Status.HELD, False, None),
        (Status.PAUSED, JobCommand.STOP, Status.FINISHING, False, Report.RECORD),
        (Status.HELD, JobCommand.ABORT, Status.FINISHING, False, Report.RECORD),
    ],
)
def test_the_mes_commands_as_every_format_takes_them(
    status: Status, command: JobCommand, after: Status, held: bool, report: Report | None
) -> None:
    execution = Execution("cell1", "J1", status=status, error="jammed", failed_action="clamp")
    run = execution.actions["clamp"] = ActionRun("clamp", "Clamp", phase=Phase.DISPATCHED)
    effects = Effects()
    assert mes_command(execution, command, effects) is held
    assert (execution.status, effects.report) == (after, report)
    assert effects.changed is (after is not status)
    if held:  # running again: the format tries the failed actions again
        assert (execution.error, execution.failed_action) == (None, None)
    if after is Status.FINISHING:
        outcome = "stopped" if command is JobCommand.STOP else "aborted by the MES"
        assert (execution.outcome, run.phase) == (outcome, Phase.CANCELLED)


@pytest.mark.parametrize(
    ("outcome", "report"),
    [("completed", Report.COMPLETE), ("aborted", Report.ABORT), ("stopped", Report.RECORD)],
)
def test_an_end_is_reported_again_as_it_was_on_any_command_but_pause(
    outcome: str, report: Report
) -> None:
    execution = Execution("cell1", "J1", status=Status.FINISHING, outcome=outcome)
    effects = Effects()
    assert not mes_command(execution, JobCommand.RESUME, effects)
    assert (effects.report, effects.changed) == (report, False)
    paused = Effects()
    assert not mes_command(execution, JobCommand.PAUSE, paused)
    assert paused == Effects()  # a Pause holds the end back: nothing reported


def test_recovery_sends_again_every_try_out_while_the_job_is_live() -> None:
    execution = Execution("cell1", "J1")
    execution.actions["a"] = ActionRun("a", "A", phase=Phase.DISPATCHED)
    execution.actions["b"] = ActionRun("b", "B", phase=Phase.PENDING)
    assert resend(execution, Effects()).sends == ["a"]
    execution.status = Status.FINISHING
    assert resend(execution, Effects()).sends == []


def test_a_condition_skips_and_an_assertion_refuses_as_in_every_format() -> None:
    scope = ConditionScope(results={"measure": {"torque": 70}}, parameters={"min": 80})
    assert skip_reason(None, scope) is None
    assert skip_reason(parse_condition("measure.torque < params.min"), scope) is None
    assert skip_reason(parse_condition("measure.torque >= params.min"), scope) == (
        "skipped: its condition 'measure.torque >= params.min' is false"
    )
    with pytest.raises(ConditionError):
        skip_reason(parse_condition("measure.angle > 1"), scope)
    # The reply's fields are bare; the action's own earlier result is not read.
    holds = parse_condition("torque >= params.min")
    assert assertion_error(holds, "measure", scope, {"torque": 85}) is None
    assert assertion_error(holds, "measure", scope, {"torque": 70}) == (
        "assertion failed: torque >= params.min"
    )
    assert assertion_error(holds, "measure", scope, "no fields") == (
        "assertion 'torque >= params.min': " + _reason(holds, scope)
    )
    assert assertion_error(None, "measure", scope, {}) is None


def _reason(condition: Condition, scope: ConditionScope) -> str:
    try:
        condition.evaluate(replace(scope, results={}, source_action="measure"))
    except ConditionError as error:
        return error.reason
    raise AssertionError("the condition was decided")


def test_binding_routes_only_an_action_that_names_no_equipment() -> None:
    routed = {"clamp": "clamp2", "press": "press2"}
    assert bound(ActionSpec("clamp", "c.v1"), routed) == ActionSpec(
        "clamp", "c.v1", equipment="clamp2"
    )
    own = ActionSpec("press", "p.v1", equipment="press1")
    assert bound(own, routed) is own
    unrouted = ActionSpec("other", "o.v1")
    assert bound(unrouted, routed) is unrouted
