"""Editing the steps of a sequence a job has not begun (``gateway.formats.StepEditing``,
with ``gateway.listedits``).

An edit names a top-level step: a command step by its name, a ``par`` block by its name (or
``par-<n>``, its default); a command inside a ``par`` block is edited with its block. The steps
before the current block have run, and the current one has begun once it is entered: neither
can be edited, nor can a step be inserted before them. While the job is paused between two
blocks, the next one has not begun: it can be edited or deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.controls import EditOp, StepEdit
from gateway.formats import Execution, RecipeError
from gateway.listedits import edit_list


def edit_sequence(recipe: Any, edit: StepEdit, execution: Execution | None) -> Any:
    """``recipe`` with ``edit`` applied; ``RecipeError`` names why it cannot be."""
    if not isinstance(recipe, Mapping) or not isinstance(recipe.get("steps"), list):
        raise RecipeError(["recipe.steps: not a sequence recipe"])
    steps: list[Any] = recipe["steps"]
    names = [_name(step, index) for index, step in enumerate(steps)]
    if edit.op not in (EditOp.ADD, EditOp.RESET) and edit.step and edit.step not in names:
        _not_in_par(steps, names, edit.step)
    return {**recipe, "steps": edit_list(steps, names, _first_pending(names, execution), edit)}


def _name(step: Any, index: int) -> str | None:
    if not isinstance(step, Mapping):
        return None
    if "par" in step:
        return str(step.get("name", f"par-{index + 1}"))
    name = step.get("name")
    return name if isinstance(name, str) else None


def _first_pending(names: list[str | None], execution: Execution | None) -> int:
    """The index of the first step that has not begun."""
    if execution is None:
        return 0
    block = int(execution.memo.get("block", 0))
    current = names[block] if block < len(names) else None
    begun = current is not None and (
        current in execution.nodes or any(run.step == current for run in execution.actions.values())
    )
    return block + 1 if begun else block


def _not_in_par(steps: list[Any], names: list[str | None], step: str) -> None:
    """A command inside a ``par`` block is edited with its block."""
    for index, item in enumerate(steps):
        inner = item.get("par") if isinstance(item, Mapping) else None
        if isinstance(inner, list) and any(
            isinstance(command, Mapping) and command.get("name") == step for command in inner
        ):
            raise RecipeError(
                [f"edit.step: {step!r} is in the par block {names[index]!r}: edit the block"]
            )
