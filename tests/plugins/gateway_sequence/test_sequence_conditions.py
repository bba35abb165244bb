"""A sequence step's condition, assertion and error policy, and a par block run again.

Pure executor (injected time, each stimulus then what a commit does); the loader's problems
named at their path. End to end through the runtime: ``test_sequence_runtime.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import (
    ActionRun,
    Effects,
    Executor,
    ExecutorOptions,
    Phase,
    RecipeError,
    Report,
    Status,
)
from gateway_runtime import dump_execution, load_execution, take_done
from gateway_runtime.compensation import compensating
from gateway_sequence.format import SequenceFormat
from gateway_sequence.model import load_sequence

T0 = 1000.0


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5, **fields}


class Job:
    def __init__(self, recipe: dict[str, Any], parameters: dict[str, Any] | None = None) -> None:
        program = SequenceFormat().compile(recipe)
        options = ExecutorOptions()
        self.executor: Executor = compensating(program.executor(parameters or {}, options), program)
        self.execution, effects = self.executor.start("cell1", "J1", T0)
        self.history: dict[str, ActionRun] = {}
        self.sent = list(effects.sends)
        self.effects = effects
        self._commit()

    def _commit(self) -> None:
        self.history.update(take_done(self.execution))
        self.execution = load_execution(dump_execution(self.execution))

    def run(self, action: str) -> ActionRun:
        return self.execution.actions.get(action) or self.history[action]

    def reply(self, action: str, data: Any = None, error: str | None = None) -> Effects:
        run = self.run(action)
        self.effects = self.executor.on_reply(self.execution, action, run.attempt, data, error, T0)
        self._commit()
        self.sent.extend(self.effects.sends)
        return self.effects


def test_a_false_condition_skips_the_step_and_sends_nothing() -> None:
    recipe = {
        "steps": [
            step("measure"),
            step("rework", condition="measure.torque < 80"),
            step("release"),
        ]
    }
    job = Job(recipe)
    assert job.reply("measure", {"torque": 85}).sends == ["release"]
    skipped = job.run("rework")
    assert skipped.phase is Phase.DONE
    assert skipped.tries == 0
    assert skipped.error == "skipped: its condition 'measure.torque < 80' is false"
    job.reply("release", {})
    assert job.effects.report is Report.COMPLETE
    assert "rework" not in job.execution.results
    assert job.sent == ["measure", "release"]


def test_a_true_condition_runs_the_step_and_parameters_may_decide() -> None:
    recipe = {"steps": [step("measure"), step("rework", condition="params.rework == true")]}
    job = Job(recipe, {"rework": True})
    assert job.reply("measure", {}).sends == ["rework"]


def test_a_block_whose_steps_are_all_skipped_is_done_at_once() -> None:
    recipe = {
        "steps": [
            {"name": "both", "par": [step("a", condition="false"), step("b", condition="false")]},
            step("c"),
        ]
    }
    job = Job(recipe)
    assert job.sent == ["c"]


def test_a_condition_that_reads_what_no_step_returns_fails_the_step() -> None:
    recipe = {"steps": [step("measure"), step("rework", condition="measure.torqe < 80")]}
    job = Job(recipe)
    effects = job.reply("measure", {"torque": 85})
    assert effects.report is Report.ABORT
    assert job.execution.error is not None
    assert job.execution.error.startswith("step rework: condition 'measure.torqe < 80': ")


def test_a_false_assertion_fails_the_try_with_its_text_and_retries() -> None:
    recipe = {"steps": [step("tighten", max_attempts=2, assertion="torque >= 80")]}
    job = Job(recipe)
    effects = job.reply("tighten", {"torque": 70})
    assert effects.sends == ["tighten"]  # tried again
    assert job.run("tighten").error == "assertion failed: torque >= 80"
    effects = job.reply("tighten", {"torque": 75})
    assert effects.report is Report.ABORT
    assert job.execution.error == "step tighten: assertion failed: torque >= 80"
    assert job.execution.results["tighten"] == {"torque": 75}  # what it read, beside the error


def test_continue_on_error_goes_on_with_the_error_kept() -> None:
    recipe = {
        "steps": [
            step("label", continue_on_error=True),
            step("reprint", condition="label.printed == false"),
        ]
    }
    job = Job(recipe)
    assert job.reply("label", {"printed": False}, error="ribbon out").sends == ["reprint"]
    failed = job.run("label")
    assert failed.phase is Phase.DONE
    assert failed.error == "ribbon out"
    assert job.execution.status is Status.RUNNING


def test_a_par_block_is_run_again_when_one_of_its_commands_failed() -> None:
    recipe = {"steps": [{"name": "both", "max_attempts": 2, "par": [step("a"), step("b")]}]}
    job = Job(recipe)
    first = {name: job.run(name).attempt for name in ("a", "b")}
    effects = job.reply("a", error="jammed")
    # b was still out: cancelled, and both are sent again with new tries.
    assert sorted(effects.sends) == ["a", "b"]
    assert all(job.run(name).attempt == first[name] + 1 for name in ("a", "b"))
    assert job.reply("b", {}, error=None).sends == []
    job.reply("a", {})
    assert job.effects.report is Report.COMPLETE


def test_a_par_block_out_of_runs_ends_as_its_step_says() -> None:
    recipe = {"steps": [{"name": "both", "max_attempts": 2, "par": [step("a"), step("b")]}]}
    job = Job(recipe)
    job.reply("a", error="jammed")
    effects = job.reply("a", error="jammed again")
    assert effects.report is Report.ABORT
    assert job.execution.error == "step a: jammed again"


def test_a_skipped_or_continued_step_is_not_undone() -> None:
    undo = {"type_id": "com.example.undo.v1"}
    recipe = {
        "steps": [
            step("clamp", compensation=undo),
            step("mark", condition="false", compensation=undo | {"name": "unmark"}),
            step("label", continue_on_error=True, compensation=undo | {"name": "unlabel"}),
            step("tighten"),
        ]
    }
    job = Job(recipe)
    job.reply("clamp", {})
    job.reply("label", error="ribbon out")
    effects = job.reply("tighten", error="torque not reached")
    assert effects.sends == ["clamp.undo"]  # only what was done is undone


@pytest.mark.parametrize(
    ("recipe", "problem"),
    [
        (
            {"steps": [step("a", condition="a.x >")]},
            "recipe.steps[0].condition: ",
        ),
        (
            {"steps": [step("a", condition="torque > 3")]},
            "recipe.steps[0].condition: 'torque' names no result here",
        ),
        (
            {"steps": [step("a", assertion="a.torque > 3")]},
            "recipe.steps[0].assertion: name the step's own reply fields bare (a.torque)",
        ),
        (
            {"steps": [step("a", condition="step.elapsed > 3")]},
            "recipe.steps[0].condition: step.elapsed is for SFC transitions",
        ),
        (
            {"steps": [step("a", condition="b.ok")]},
            "recipe.steps: step a's condition names 'b', which is no step",
        ),
        ({"steps": [step("a", continue_on_error="yes")]}, "recipe.steps[0].continue_on_error"),
        (
            {"steps": [{"par": [step("a"), step("b")], "max_attempts": 0}]},
            "recipe.steps[0].max_attempts: must be a whole number >= 1, got 0",
        ),
    ],
)
def test_a_bad_condition_or_policy_is_named_at_its_path(recipe: Any, problem: str) -> None:
    with pytest.raises(RecipeError) as caught:
        load_sequence(recipe)
    problems = caught.value.problems
    assert any(found.startswith(problem) for found in problems), problems


def test_the_drawing_shows_what_the_workflow_model_adds_to_a_step() -> None:
    recipe = {
        "steps": [
            step("clamp", equipment="clamp1", compensation={"name": "unclamp", "type_id": "u"}),
            step("rework", condition="clamp.closed == true"),
            step("tighten", fan_out={"members": "declared", "policy": 3}),
            {
                "name": "per_slot",
                "fan_out": {"members": ["s1", "s2"]},
                "steps": [step("insert"), step("test")],
            },
        ]
    }
    recipe_format = SequenceFormat()
    program = recipe_format.compile(recipe)
    svg = recipe_format.render_svg(program)
    assert "clamp1 | undo: unclamp" in svg
    assert "if clamp.closed == true" in svg
    assert "to each member (3)" in svg
    assert "per member: insert &gt; test" in svg
    assert 'data-action="per_slot"' in svg
    assert "undo: unclamp" in recipe_format.render_mermaid(program)
