"""A step's ``retry``: the whole step run again when one of its actions failed, after a backoff
kept as a durable timer (the pure executor with a fake clock), and its validation."""

from __future__ import annotations

from typing import Any

from gateway.formats import Phase, Status, TimerKind
from gateway_sfc.format import SfcFormat
from gateway_sfc.validation import validate_recipe
from tests.plugins.gateway_sfc.test_engine import Run, chain, push, steps


def clamp_and_tighten(step_retry: dict[str, Any], **tighten: Any) -> dict[str, Any]:
    """Step Work clamps and tightens at once; ``step_retry``: the step's ``retry``."""
    work = {"name": "Work", "retry": step_retry}
    return {
        "steps": [{"name": "Init", "initial": True}, work, {"name": "End"}],
        "transitions": chain("Init", "Work", "End"),
        "actions": [push("clamp", "Work"), push("tighten", "Work", **tighten)],
    }


def test_a_failed_action_runs_its_whole_step_again_after_the_backoff() -> None:
    job = Run(clamp_and_tighten({"max_attempts": 2, "backoff_seconds": 2}))
    job.reply("clamp")
    first_try = job.attempt("tighten")
    job.reply("tighten", error="torque not reached")
    assert job.status is Status.RUNNING
    assert job.active == {"Work"}
    assert [job.phase("clamp"), job.phase("tighten")] == [Phase.PENDING, Phase.PENDING]
    due = [timer for timer in job.effects.timers if timer.kind is TimerKind.DUE]
    assert sorted((timer.action, timer.due) for timer in due) == [
        ("clamp", job.now + 2),
        ("tighten", job.now + 2),
    ]
    sent = len(job.sent)
    job.advance(1.9)
    assert len(job.sent) == sent  # nothing goes out before the backoff has passed
    job.advance(0.1)
    assert job.sent[sent:] == ["clamp", "tighten"]  # every action of the step, afresh
    assert job.attempt("tighten") == first_try + 1  # a new correlation id
    job.reply("clamp")
    job.reply("tighten")
    assert (job.status, job.execution.outcome) == (Status.FINISHING, "completed")


def test_a_try_still_out_when_the_step_runs_again_is_answered_in_vain() -> None:
    job = Run(clamp_and_tighten({"max_attempts": 2, "backoff_seconds": 0}))
    late = job.attempt("clamp")  # still out when tighten fails
    job.reply("tighten", error="torque not reached")
    assert job.attempt("clamp") == late + 1  # no backoff: sent again at once
    effects = job.executor.on_reply(job.execution, "clamp", late, {"ok": True}, None, job.now)
    assert not effects.changed
    assert job.phase("clamp") is Phase.DISPATCHED


def test_a_step_out_of_runs_fails_as_its_action_says_and_names_its_runs() -> None:
    job = Run(clamp_and_tighten({"max_attempts": 2, "backoff_seconds": 0}))
    job.reply("clamp")
    job.reply("tighten", error="torque not reached")
    job.reply("clamp")
    job.reply("tighten", error="torque not reached")
    assert job.status is Status.FINISHING
    assert job.execution.outcome == "aborted"
    assert job.execution.error == (
        "action tighten (step Work, run 2 times) failed after 1 tries: "
        "equipment reported: torque not reached"
    )


def test_the_action_s_own_tries_come_first_then_the_step_runs_again() -> None:
    retry = {"max_attempts": 2, "backoff_seconds": 0}
    job = Run(clamp_and_tighten({"max_attempts": 2, "backoff_seconds": 0}, retry=retry))
    job.reply("clamp")
    job.reply("tighten", error="torque not reached")
    assert job.run("tighten").tries == 2  # its own retry, the clamp left done
    assert job.phase("clamp") is Phase.DONE
    job.reply("tighten", error="torque not reached")
    assert job.phase("clamp") is Phase.DISPATCHED  # now the step runs again
    assert job.run("tighten").tries == 1


def test_entering_the_step_again_gives_it_its_runs_again() -> None:
    recipe = clamp_and_tighten({"max_attempts": 2, "backoff_seconds": 0})
    recipe["transitions"] = [
        {"source": "Init", "target": "Work"},
        {"source": "Work", "target": "Init", "condition": "tighten.again == true"},
        {"source": "Work", "target": "End", "condition": "tighten.again == false"},
    ]
    job = Run(recipe)
    job.reply("clamp")
    job.reply("tighten", error="torque not reached")  # the step's second run
    job.reply("clamp")
    job.reply("tighten", {"again": True})  # loops back into Work
    assert job.active == {"Work"}
    assert "step_runs" not in job.execution.memo
    job.reply("tighten", error="torque not reached")
    assert job.status is Status.RUNNING  # a second run again, not the end


def test_a_step_without_actions_cannot_retry_and_bad_retries_are_named_at_their_path() -> None:
    recipe = {
        "steps": [
            {"name": "Init", "initial": True, "retry": {"max_attempts": 2}},
            {"name": "Work", "retry": {"max_attempts": 0}},
        ],
        "transitions": chain("Init", "Work"),
        "actions": [push("tighten", "Work")],
    }
    assert validate_recipe(recipe) == [
        "recipe.steps[0].retry: the step has no action to run again",
        "recipe.steps[1]: retry max_attempts must be >= 1",
    ]
    recipe["steps"] = [*steps("Init"), {"name": "Work", "retry": {"max_attempts": "2"}}]
    (problem,) = validate_recipe(recipe)
    assert problem.startswith("recipe.steps[1].retry.max_attempts: ")


def test_the_drawing_marks_a_step_that_runs_again() -> None:
    program = SfcFormat().compile(clamp_and_tighten({"max_attempts": 3, "backoff_seconds": 2}))
    svg = SfcFormat().render_svg(program)
    assert "<title>runs up to 3 times, 2 s apart at first</title>↻3</text>" in svg
