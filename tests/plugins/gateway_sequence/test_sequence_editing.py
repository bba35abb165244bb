"""Editing a sequence's pending steps, no servers: what an edit makes of the recipe given the
job's state, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.controls import EditOp, StepEdit
from gateway.formats import ActionRun, Execution, NodeRun, RecipeError
from gateway_sequence.editing import edit_sequence
from gateway_sequence.format import SequenceFormat


def step(name: str) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1"}


RECIPE = {"steps": [step("a"), {"name": "both", "par": [step("b1"), step("b2")]}, step("c")]}


def in_block(index: int, *, entered: bool) -> Execution:
    execution = Execution(scope="s", job="j", memo={"block": index})
    name = ["a", "both", "c"][index]
    if entered:
        execution.nodes[name] = NodeRun(name, 0.0)
        execution.actions[name] = ActionRun(name, name)
    return execution


def names(recipe: dict[str, Any]) -> list[str]:
    return [item["name"] for item in recipe["steps"]]


@pytest.mark.parametrize(
    ("edit", "execution", "expected"),
    [
        (StepEdit(EditOp.ADD, new=step("d")), None, ["a", "both", "c", "d"]),
        (
            StepEdit(EditOp.INSERT, "a", step("x")),
            in_block(0, entered=True),
            ["a", "x", "both", "c"],
        ),
        (StepEdit(EditOp.REPLACE, "both", step("y")), in_block(0, entered=True), ["a", "y", "c"]),
        (StepEdit(EditOp.DELETE, "c"), in_block(1, entered=True), ["a", "both"]),
        # Paused between a and both: both has not begun.
        (StepEdit(EditOp.DELETE, "both"), in_block(1, entered=False), ["a", "c"]),
        (StepEdit(EditOp.RESET), in_block(1, entered=True), ["a", "both"]),
        (StepEdit(EditOp.RESET), in_block(1, entered=False), ["a"]),
    ],
)
def test_an_edit_changes_only_steps_not_begun(
    edit: StepEdit, execution: Execution | None, expected: list[str]
) -> None:
    edited = edit_sequence(RECIPE, edit, execution)
    assert names(edited) == expected
    SequenceFormat().compile(edited)  # still a sequence


@pytest.mark.parametrize(
    ("edit", "execution", "problem"),
    [
        (StepEdit(EditOp.DELETE, "a"), in_block(0, entered=True), "step 'a' has begun"),
        (StepEdit(EditOp.INSERT, "a", step("x")), in_block(1, entered=True), "'both' has begun"),
        (StepEdit(EditOp.REPLACE, "b1", step("x")), None, "'b1' is in the par block 'both'"),
        (StepEdit(EditOp.DELETE, "q"), None, "no step 'q' (steps: a, both, c)"),
        (StepEdit(EditOp.INSERT, "a"), None, "edit.new: required"),
    ],
)
def test_an_edit_that_cannot_be_made_says_why(
    edit: StepEdit, execution: Execution | None, problem: str
) -> None:
    with pytest.raises(RecipeError) as refused:
        edit_sequence(RECIPE, edit, execution)
    assert problem in str(refused.value)
