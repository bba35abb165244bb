"""An SFC action's condition, assertion and ``on_error: continue`` (pure executor)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import ActionRun, Effects, ExecutorOptions, Phase, Report
from gateway_runtime import dump_execution, load_execution, take_done
from gateway_sfc.format import SfcFormat
from gateway_sfc.validation import validate_recipe

T0 = 1000.0


def action(name: str, step: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "step": step,
        "interaction": "push_command",
        "type_id": f"com.example.{name}.v1",
        "timeout_seconds": 5,
        **fields,
    }


def chart(*actions: dict[str, Any]) -> dict[str, Any]:
    """Measure, then Fix, then Done; the actions given."""
    return {
        "steps": [{"name": "Measure", "initial": True}, {"name": "Fix"}, {"name": "Done"}],
        "transitions": [
            {"source": "Measure", "target": "Fix"},
            {"source": "Fix", "target": "Done"},
        ],
        "actions": list(actions),
    }


class Job:
    def __init__(self, recipe: dict[str, Any]) -> None:
        program = SfcFormat().compile(recipe)
        self.executor = program.executor({"rework": True}, ExecutorOptions())
        self.execution, self.effects = self.executor.start("cell1", "J1", T0)
        self.sent = list(self.effects.sends)
        self.history: dict[str, ActionRun] = {}
        self._commit()

    def _commit(self) -> None:
        self.history.update(take_done(self.execution))
        self.execution = load_execution(dump_execution(self.execution))

    def run(self, name: str) -> ActionRun:
        return self.execution.actions.get(name) or self.history[name]

    def reply(self, name: str, data: Any = None, error: str | None = None) -> Effects:
        run = self.run(name)
        self.effects = self.executor.on_reply(self.execution, name, run.attempt, data, error, T0)
        self._commit()
        self.sent.extend(self.effects.sends)
        return self.effects


def test_a_false_condition_skips_the_action_and_the_step_is_left() -> None:
    job = Job(
        chart(
            action("measure", "Measure"),
            action("rework", "Fix", condition="measure.torque < 80"),
        )
    )
    effects = job.reply("measure", {"torque": 85})
    assert effects.report is Report.COMPLETE
    assert job.sent == ["measure"]
    assert job.run("rework").phase is Phase.DONE
    assert job.run("rework").error == "skipped: its condition 'measure.torque < 80' is false"


def test_a_true_condition_runs_it_and_parameters_may_decide() -> None:
    job = Job(
        chart(action("measure", "Measure"), action("rework", "Fix", condition="params.rework"))
    )
    assert job.reply("measure", {"torque": 85}).sends == ["rework"]


def test_a_false_assertion_fails_the_try_and_the_retry_policy_applies() -> None:
    refused = action(
        "measure",
        "Measure",
        assertion="torque >= 80",
        retry={"max_attempts": 2, "backoff_seconds": 0},
    )
    job = Job(chart(refused))
    job.reply("measure", {"torque": 70})
    assert job.run("measure").error == "assertion failed: torque >= 80"
    assert job.run("measure").tries == 2  # tried again (no backoff)
    assert job.sent == ["measure", "measure"]
    job.reply("measure", {"torque": 75})
    assert job.effects.report is Report.ABORT
    assert job.execution.error is not None
    assert job.execution.error.endswith("failed after 2 tries: assertion failed: torque >= 80")


def test_on_error_continue_goes_on_with_the_error_and_the_data_kept() -> None:
    measure = action("measure", "Measure", assertion="torque >= 80", on_error="continue")
    job = Job(chart(measure, action("rework", "Fix", condition="measure.torque < 80")))
    assert job.reply("measure", {"torque": 70}).sends == ["rework"]
    assert job.run("measure").error == "assertion failed: torque >= 80"
    assert job.execution.results["measure"] == {"torque": 70}


@pytest.mark.parametrize(
    ("changed", "problem"),
    [
        ({"condition": "x >"}, "recipe.actions[1].condition: "),
        ({"condition": "nope.ok"}, "recipe.actions[1].condition: 'nope' names no action"),
        ({"condition": "torque > 1"}, "recipe.actions[1].condition: 'torque' names no named"),
        ({"assertion": "step.elapsed > 1"}, "recipe.actions[1].assertion: step.elapsed is for"),
        ({"on_error": "ignore"}, "recipe.actions[1].on_error"),
    ],
)
def test_a_bad_condition_is_named_at_its_path(changed: dict[str, Any], problem: str) -> None:
    problems = validate_recipe(chart(action("measure", "Measure"), action("fix", "Fix", **changed)))
    assert any(found.startswith(problem) for found in problems), problems
