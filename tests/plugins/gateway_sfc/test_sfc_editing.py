"""Editing a chart's steps before its job runs, no servers: the chart each edit makes (it
still compiles) and what is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.controls import EditOp, StepEdit
from gateway.formats import Execution, NodeRun, RecipeError
from gateway_sfc.format import SfcFormat

REAR_AXLE = json.loads(
    (Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json").read_text()
)
LABEL = {
    "name": "Label",
    "actions": [
        {"name": "label", "interaction": "push_command", "type_id": "com.example.label.v1"}
    ],
}


def at_positioning() -> Execution:
    """A running job in Positioning (and QaCheck): Init and the branch were reached."""
    execution = Execution("s", "j", reached=["Init", "FitAndQa", "Positioning", "QaCheck"])
    for name in ("FitAndQa", "Positioning", "QaCheck"):
        execution.nodes[name] = NodeRun(name, 0.0)
    return execution


def edited(edit: StepEdit, execution: Execution | None = None) -> dict[str, Any]:
    chart: dict[str, Any] = SfcFormat().edit_steps(REAR_AXLE, edit, execution)
    SfcFormat().compile(chart)
    return chart


def links(chart: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["source"], t["target"]) for t in chart["transitions"]}


def test_insert_after_a_step_with_one_transition_goes_between_it_and_its_target() -> None:
    chart = edited(StepEdit(EditOp.INSERT, "Init", LABEL))
    assert {("Init", "Label"), ("Label", "FitAndQa")} <= links(chart)
    assert ("Init", "FitAndQa") not in links(chart)
    assert {
        "name": "label",
        "interaction": "push_command",
        "type_id": "com.example.label.v1",
        "step": "Label",
    } in chart["actions"]


def test_insert_on_a_branch_path_follows_the_step_there() -> None:
    chart = edited(StepEdit(EditOp.INSERT, "Positioning", LABEL))
    assert chart["branches"][0]["branches"][0] == ["Positioning", "Label", "TightenBolts"]


def test_replace_renames_everywhere_and_delete_takes_a_step_off_its_path() -> None:
    renamed = edited(StepEdit(EditOp.REPLACE, "TightenBolts", {**LABEL, "name": "Fasten"}))
    assert renamed["branches"][0]["branches"][0] == ["Positioning", "Fasten"]
    assert [a["name"] for a in renamed["actions"] if a["step"] == "Fasten"] == ["label"]
    deleted = edited(StepEdit(EditOp.DELETE, "TightenBolts"))
    assert deleted["branches"][0]["branches"][0] == ["Positioning"]
    assert "tighten" not in {a["name"] for a in deleted["actions"]}


@pytest.mark.parametrize(
    ("edit", "execution", "problem"),
    [
        (StepEdit(EditOp.INSERT, "Init", LABEL), at_positioning(), "step 'Init' has been reached"),
        (StepEdit(EditOp.DELETE, "Positioning"), at_positioning(), "cannot edit it"),
        (StepEdit(EditOp.INSERT, "VerifyTorque", LABEL), None, "has 2 transitions out"),
        (StepEdit(EditOp.DELETE, "VerifyTorque"), None, "is not on a straight line"),
        (StepEdit(EditOp.ADD, new=LABEL), None, "add has no place in a chart"),
        (StepEdit(EditOp.RESET), None, "reset has no place in a chart"),
        (StepEdit(EditOp.DELETE, "Nope"), None, "no step 'Nope'"),
    ],
)
def test_an_edit_that_cannot_be_made_says_why(
    edit: StepEdit, execution: Execution | None, problem: str
) -> None:
    with pytest.raises(RecipeError) as refused:
        SfcFormat().edit_steps(REAR_AXLE, edit, execution)
    assert problem in str(refused.value)


def test_a_running_job_takes_edits_of_the_steps_it_has_not_reached() -> None:
    after_active = edited(StepEdit(EditOp.INSERT, "Positioning", LABEL), at_positioning())
    assert after_active["branches"][0]["branches"][0] == ["Positioning", "Label", "TightenBolts"]
    replaced = edited(StepEdit(EditOp.REPLACE, "TightenBolts", LABEL), at_positioning())
    assert "Label" in {step["name"] for step in replaced["steps"]}
