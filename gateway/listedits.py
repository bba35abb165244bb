"""Editing a recipe whose steps are a list: what a ``StepEdit`` does to it, for any format.

A format whose recipe is a list of steps (``gateway.formats.StepEditing``) says which step
carries which name and how many of the first steps a job has begun; ``edit_list`` does the rest
the same way for every such format. The steps a job has begun cannot be edited, nor can a step
be inserted before one of them; ``reset`` drops every step not begun; ``add`` appends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.controls import EditOp, StepEdit
from gateway.formats import RecipeError


def edit_list(
    steps: Sequence[Any], names: Sequence[str | None], begun: int, edit: StepEdit
) -> list[Any]:
    """``steps`` (named ``names``; the first ``begun`` have begun) with ``edit`` applied;
    ``RecipeError`` names why it cannot be. A new step is the edit's JSON object, as given."""
    edited = list(steps)
    if edit.op is EditOp.RESET:
        return edited[:begun]
    if edit.op is EditOp.ADD:
        return [*edited, new_step(edit)]
    index = step_index(names, edit.step)
    if edit.op is EditOp.INSERT:
        if index + 1 < begun:
            after = names[index + 1]
            raise RecipeError(
                [f"edit.step: cannot insert after {edit.step!r}: {after!r} has begun"]
            )
        edited.insert(index + 1, new_step(edit))
    elif index < begun:
        raise RecipeError([f"edit.step: step {edit.step!r} has begun: it cannot be edited"])
    elif edit.op is EditOp.REPLACE:
        edited[index] = new_step(edit)
    else:
        del edited[index]
    return edited


def step_index(names: Sequence[str | None], step: str | None) -> int:
    """Where the step the edit names is; ``RecipeError`` when there is none of that name."""
    if step is None:
        raise RecipeError(["edit.step: required: the step the edit is about"])
    if step not in names:
        known = ", ".join(name for name in names if name)
        raise RecipeError([f"edit.step: no step {step!r} (steps: {known})"])
    return names.index(step)


def new_step(edit: StepEdit) -> dict[str, Any]:
    """The edit's new step: a JSON object (what it holds, the format's compiler checks)."""
    if not isinstance(edit.new, Mapping):
        raise RecipeError(["edit.new: required: the new step, a JSON object"])
    return dict(edit.new)
