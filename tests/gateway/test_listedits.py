"""``gateway.listedits``: a ``StepEdit`` applied to a list of steps, the begun ones kept."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.controls import EditOp, StepEdit
from gateway.formats import RecipeError
from gateway.listedits import edit_list, new_step, step_index

STEPS = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
NAMES = ["a", "b", "c"]
NEW = {"name": "n"}


@pytest.mark.parametrize(
    ("edit", "begun", "names"),
    [
        (StepEdit(EditOp.ADD, new=NEW), 3, ["a", "b", "c", "n"]),
        (StepEdit(EditOp.RESET), 1, ["a"]),
        (StepEdit(EditOp.RESET), 0, []),
        (StepEdit(EditOp.INSERT, "a", NEW), 1, ["a", "n", "b", "c"]),  # after the current
        (StepEdit(EditOp.INSERT, "c", NEW), 0, ["a", "b", "c", "n"]),
        (StepEdit(EditOp.REPLACE, "b", NEW), 1, ["a", "n", "c"]),
        (StepEdit(EditOp.DELETE, "c", None), 2, ["a", "b"]),
    ],
)
def test_an_edit_changes_only_the_steps_not_begun(
    edit: StepEdit, begun: int, names: list[str]
) -> None:
    edited = edit_list(STEPS, NAMES, begun, edit)
    assert [step["name"] for step in edited] == names
    assert [step["name"] for step in STEPS] == NAMES  # the recipe's own list is left as it is


@pytest.mark.parametrize(
    ("edit", "begun", "problem"),
    [
        (
            StepEdit(EditOp.REPLACE, "a", NEW),
            1,
            "edit.step: step 'a' has begun: it cannot be edited",
        ),
        (
            StepEdit(EditOp.DELETE, "b", None),
            2,
            "edit.step: step 'b' has begun: it cannot be edited",
        ),
        (StepEdit(EditOp.INSERT, "a", NEW), 2, "edit.step: cannot insert after 'a': 'b' has begun"),
        (StepEdit(EditOp.DELETE, "x", None), 0, "edit.step: no step 'x' (steps: a, b, c)"),
        (StepEdit(EditOp.DELETE, None, None), 0, "edit.step: required: the step the edit is about"),
        (StepEdit(EditOp.ADD, new="n"), 0, "edit.new: required: the new step, a JSON object"),
        (StepEdit(EditOp.REPLACE, "c"), 0, "edit.new: required: the new step, a JSON object"),
    ],
)
def test_an_edit_that_cannot_be_says_why(edit: StepEdit, begun: int, problem: str) -> None:
    with pytest.raises(RecipeError) as refused:
        edit_list(STEPS, NAMES, begun, edit)
    assert refused.value.problems == [problem]


def test_unnamed_steps_are_listed_by_name_only() -> None:
    assert step_index(["a", None, "c"], "c") == 2
    with pytest.raises(RecipeError, match=r"\(steps: a, c\)"):
        step_index(["a", None, "c"], "b")


def test_the_new_step_is_a_copy_of_the_edits_object() -> None:
    new: dict[str, Any] = {"name": "n"}
    copied = new_step(StepEdit(EditOp.ADD, new=new))
    assert copied == new
    assert copied is not new
