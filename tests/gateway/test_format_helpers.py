"""The rules every executor shares, as ``gateway.formats`` carries them out."""

from __future__ import annotations

from gateway.formats import ActionRun, Effects, Execution, Phase, Timer, TimerKind, dispatch


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
