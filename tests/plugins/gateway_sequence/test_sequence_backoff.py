"""A sequence step's and a par block's ``backoff_seconds``: the next try (or run of the block)
waits on a durable ``DUE`` timer, never in a sleep (the pure executor, injected time)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import Effects, Phase, RecipeError, Report, Status, Timer, TimerKind
from gateway.recipes import JobCommand
from gateway_sequence.format import SequenceFormat
from gateway_sequence.model import load_sequence
from tests.plugins.gateway_sequence.test_sequence_executor import Job, step


def due(job: Job, effects: Effects) -> Effects:
    """Let the time pass to the one ``DUE`` timer of ``effects`` and fire it."""
    (timer,) = [timer for timer in effects.timers if timer.kind is TimerKind.DUE]
    job.now = timer.due
    return job._record(job.executor.on_timer(job.execution, timer, job.now))


def test_a_failed_step_is_tried_again_after_its_backoff() -> None:
    job = Job({"steps": [step("a", max_attempts=2, backoff_seconds=3), step("b")]})
    first = job.run("a").attempt
    effects = job.reply("a", error="jammed")
    assert effects.sends == []  # not at once
    assert job.run("a").phase is Phase.PENDING
    assert [(t.kind, t.action, t.due) for t in effects.timers] == [(TimerKind.DUE, "a", 1003.0)]
    early = Timer(1003.0, TimerKind.DUE, "a")
    assert job.executor.on_timer(job.execution, early, 1002.0).timers == [early]  # set again
    assert due(job, effects).sends == ["a"]
    assert job.run("a").attempt == first + 1
    job.reply("a")
    assert job.block == ["b"]


def test_the_drawing_says_how_often_and_how_far_apart_a_step_is_tried() -> None:
    recipe = {"steps": [step("a", max_attempts=3, backoff_seconds=2.5), step("b")]}
    program = SequenceFormat().compile(recipe)
    assert "3 tries, 2.5 s apart" in SequenceFormat().render_svg(program)


def test_the_recipe_s_backoff_is_every_step_s_default() -> None:
    job = Job({"backoff_seconds": 2, "max_attempts": 2, "steps": [step("a")]})
    effects = job.reply("a", error="jammed")
    assert [(t.kind, t.due) for t in effects.timers] == [(TimerKind.DUE, 1002.0)]


def test_a_par_block_runs_again_after_its_backoff() -> None:
    block = {"name": "both", "max_attempts": 2, "backoff_seconds": 5}
    job = Job({"steps": [{**block, "par": [step("a"), step("b")]}]})
    effects = job.reply("a", error="jammed")
    assert effects.sends == []
    assert {job.run(name).phase for name in ("a", "b")} == {Phase.PENDING}
    due_at = {(t.action, t.due) for t in effects.timers if t.kind is TimerKind.DUE}
    assert due_at == {("a", 1005.0), ("b", 1005.0)}
    for timer in sorted(effects.timers, key=lambda timer: timer.action):
        job.now = timer.due
        job._record(job.executor.on_timer(job.execution, timer, job.now))
    assert job.sent[-2:] == ["a", "b"]
    job.reply("a")
    job.reply("b")
    assert job.effects.report is Report.COMPLETE


def test_a_try_waiting_for_its_backoff_is_cancelled_by_an_abort() -> None:
    job = Job({"steps": [step("a", max_attempts=2, backoff_seconds=3)]})
    effects = job.reply("a", error="jammed")
    job.command(JobCommand.ABORT)
    assert job.status is Status.FINISHING
    assert due(job, effects).sends == []


@pytest.mark.parametrize(
    ("recipe", "problem"),
    [
        (
            {"steps": [step("a", backoff_seconds=-1)]},
            "recipe.steps[0].backoff_seconds: must be >= 0, got -1",
        ),
        (
            {"backoff_seconds": "soon", "steps": [step("a")]},
            "recipe.backoff_seconds: must be a number of seconds >= 0, got 'soon'",
        ),
        (
            {"steps": [{"par": [step("a"), step("b")], "backoff_seconds": True}]},
            "recipe.steps[0].backoff_seconds: must be a number of seconds >= 0, got True",
        ),
    ],
)
def test_a_bad_backoff_is_named_at_its_path(recipe: dict[str, Any], problem: str) -> None:
    with pytest.raises(RecipeError) as raised:
        load_sequence(recipe)
    assert problem in raised.value.problems
