"""Editing the steps of a chart (``gateway.formats.StepEditing``) not reached yet.

A chart's steps are not a list, and a chart may loop back: what "has begun" means is "has been
reached". Before the job runs, every step may be edited; while it runs, only the steps it has
not reached yet (``Execution.reached``, which the runtime keeps: a step it entered once stays
reached, also when a loop would enter it again). A new step may be inserted after the step
that is active (a re-work step after the current one) or after one not reached. An edit names
a step; a step comes with its actions, and a new step is ``{"name": ..., "actions": [...]}``
(its actions as in the chart, without ``step``):

- insert after X: on a branch path, the new step follows X on the path; else X must have one
  transition out, ``X -> T [c]``, which becomes ``X -> new [c]`` and ``new -> T [always]``
  (none: ``X -> new [always]``);
- replace X: X's actions (and its name, everywhere, if the new step has another) replaced;
- delete X: on a branch path with other steps, dropped from it; else X (not initial) must have
  one transition in, ``P -> X [c]``, and one out, ``X -> T [always]``: ``P -> T [c]``;
- add and reset have no place in a chart: refused.

Charts in the snake_case spelling only (the PascalCase spelling of OPC UA JSON is refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.controls import EditOp, StepEdit
from gateway.formats import Execution, RecipeError
from gateway.listedits import step_index

ALWAYS = "always"


def edit_chart(recipe: Any, edit: StepEdit, execution: Execution | None) -> Any:
    """``recipe`` with ``edit`` applied; ``RecipeError`` names why it cannot be."""
    if not isinstance(recipe, Mapping) or not isinstance(recipe.get("steps"), list):
        raise RecipeError(["recipe.steps: not an SFC chart in the snake_case spelling"])
    if edit.op in (EditOp.ADD, EditOp.RESET):
        raise RecipeError(
            [f"edit: {edit.op.value} has no place in a chart (SFC: insert after a step)"]
        )
    chart = _Chart(recipe)
    name = edit.step or ""
    step_index([str(step.get("name")) for step in chart.steps], name)  # there is one
    _check_not_reached(edit, execution)
    if edit.op is EditOp.INSERT:
        chart.insert_after(name, _new(edit))
    elif edit.op is EditOp.REPLACE:
        chart.replace(name, _new(edit))
    else:
        chart.delete(name)
    return chart.document()


def _check_not_reached(edit: StepEdit, execution: Execution | None) -> None:
    """A running job's edit touches only steps it has not reached (insert: after the active
    step, or one not reached)."""
    if execution is None:
        return
    name = edit.step or ""
    reached = set(execution.reached) | execution.nodes.keys()
    if edit.op is EditOp.INSERT and name in execution.nodes:
        return
    if name in reached:
        doing = "insert after it" if edit.op is EditOp.INSERT else "edit it"
        raise RecipeError(
            [
                f"edit.step: step {name!r} has been reached: cannot {doing} (SFC: only the steps "
                "a running job has not reached)"
            ]
        )


class _Chart:
    """A chart's JSON, copied, edited in place."""

    def __init__(self, recipe: Mapping[str, Any]) -> None:
        self.recipe = dict(recipe)
        self.steps: list[dict[str, Any]] = [dict(step) for step in recipe["steps"]]
        self.transitions: list[dict[str, Any]] = [dict(t) for t in recipe.get("transitions", [])]
        self.actions: list[dict[str, Any]] = [dict(a) for a in recipe.get("actions", [])]
        self.branches: list[dict[str, Any]] = [
            {**branch, "branches": [list(path) for path in branch.get("branches", [])]}
            for branch in recipe.get("branches", [])
        ]

    def document(self) -> dict[str, Any]:
        document = {**self.recipe, "steps": self.steps, "transitions": self.transitions}
        document["actions"] = self.actions
        if self.branches or "branches" in self.recipe:
            document["branches"] = self.branches
        return document

    def _path_of(self, name: str) -> list[str] | None:
        for branch in self.branches:
            paths: list[list[str]] = branch["branches"]
            for path in paths:
                if name in path:
                    return path
        return None

    def _out(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.transitions if t.get("source") == name]

    def _in(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.transitions if t.get("target") == name]

    def _add_step(self, after: str, step: Mapping[str, Any]) -> str:
        new = str(step.get("name"))
        index = next(i for i, item in enumerate(self.steps) if item.get("name") == after)
        self.steps.insert(index + 1, {"name": new})
        for action in step.get("actions", []):
            self.actions.append({**action, "step": new})
        return new

    def insert_after(self, name: str, step: Mapping[str, Any]) -> None:
        path = self._path_of(name)
        out = self._out(name)
        if path is None and len(out) > 1:
            targets = ", ".join(str(t.get("target")) for t in out)
            raise RecipeError(
                [
                    f"edit.step: {name!r} has {len(out)} transitions out ({targets}): insert after "
                    "a step with one"
                ]
            )
        new = self._add_step(name, step)
        if path is not None:
            path.insert(path.index(name) + 1, new)
        elif out:
            target = out[0]["target"]
            out[0]["target"] = new
            self.transitions.append({"source": new, "target": target, "condition": ALWAYS})
        else:
            self.transitions.append({"source": name, "target": new, "condition": ALWAYS})

    def replace(self, name: str, step: Mapping[str, Any]) -> None:
        new = str(step.get("name", name))
        self.actions = [action for action in self.actions if action.get("step") != name]
        for action in step.get("actions", []):
            self.actions.append({**action, "step": new})
        if new == name:
            return
        for item in self.steps:
            if item.get("name") == name:
                item["name"] = new
        for transition in self.transitions:
            for end in ("source", "target"):
                if transition.get(end) == name:
                    transition[end] = new
        for branch in self.branches:
            branch["branches"] = [[new if s == name else s for s in p] for p in branch["branches"]]

    def delete(self, name: str) -> None:
        path = self._path_of(name)
        if path is not None and len(path) > 1:
            path.remove(name)
        else:
            self._unlink(name)
        self.steps = [item for item in self.steps if item.get("name") != name]
        self.actions = [action for action in self.actions if action.get("step") != name]

    def _unlink(self, name: str) -> None:
        """``P -> X [c]`` and ``X -> T [always]`` become ``P -> T [c]``."""
        step = next(item for item in self.steps if item.get("name") == name)
        into, out = self._in(name), self._out(name)
        if step.get("initial") or len(into) != 1 or len(out) != 1:
            raise RecipeError(
                [
                    f"edit.step: {name!r} is not on a straight line (one transition in, one out, "
                    "not initial): it cannot be deleted"
                ]
            )
        if out[0].get("condition", ALWAYS) != ALWAYS:
            raise RecipeError(
                [f"edit.step: the transition out of {name!r} has a condition: it cannot be deleted"]
            )
        into[0]["target"] = out[0]["target"]
        self.transitions.remove(out[0])


def _new(edit: StepEdit) -> Mapping[str, Any]:
    new = edit.new
    if not isinstance(new, Mapping) or not isinstance(new.get("name"), str):
        raise RecipeError(['edit.new: required: {"name": ..., "actions": [...]}'])
    if not isinstance(new.get("actions", []), list):
        raise RecipeError(["edit.new.actions: must be a list of actions"])
    return new
