"""Editing a chart's steps before its job runs, no servers: the chart each edit makes (it
still compiles) and what is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.formats import Execution, RecipeError
from gateway.recipes import EditOp, StepEdit
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


def edited(edit: StepEdit) -> dict[str, Any]:
    chart: dict[str, Any] = SfcFormat().edit_steps(REAR_AXLE, edit, None)
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
        (StepEdit(EditOp.INSERT, "Init", LABEL), Execution("s", "j"), "a running chart's steps"),
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
