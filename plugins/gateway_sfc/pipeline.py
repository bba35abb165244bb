"""The per-member ``pipeline`` of an SFC action: steps each member of its fan-out runs on its own.

    {"name": "per_slot", "step": "Test", "interaction": "push_command",
     "fan_out": {"members": ["slot1", "slot2", "slot3"], "policy": 2},
     "pipeline": [{"name": "insert", "type_id": "com.example.bench.insert.v1"},
                  {"name": "bench", "type_id": "com.example.bench.test.v1", "max_attempts": 2}]}

The runtime runs it as it runs a sequence's pipeline block (``gateway_runtime.fanout``): each
member runs the steps one after the other, independently of the others, a member whose step
failed (after that step's ``max_attempts``) stops its own pipeline, the fan-out's policy decides
the action; its result is, per member, its steps' results by name. The action names no
``type_id`` (each step has its own; ``"declared"`` members declare the first step's) and has no
compensation; its steps name no equipment (the member is theirs). Problems are named at their
path, ``recipe.actions[2].pipeline[1].type_id``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.formats import ActionSpec
from gateway.pipelines import load_pipeline
from gateway.recipefields import DEFAULT_TIMEOUT_SECONDS
from gateway_sfc.model import Action, Recipe


def pipeline_of(action: Action, where: str, problems: list[str]) -> tuple[ActionSpec, ...]:
    """The action's pipeline steps (empty: none, or problems, added to ``problems``); the
    action's ``timeout_seconds`` is its steps' default."""
    if action.pipeline is None:
        return ()
    if action.fan_out is None:
        problems.append(f"{where}: a pipeline runs per member: the action needs a fan_out")
    if action.type_id:
        problems.append(f"{where}: leave the action's type_id out (each step has its own)")
    if action.compensation is not None:
        problems.append(f"{where}: a pipeline action cannot have a compensation")
    defaults = {"timeout_seconds": action.timeout_seconds or DEFAULT_TIMEOUT_SECONDS}
    return load_pipeline(action.pipeline, where, problems, defaults)


def pipeline_timeout(action: Action) -> float:
    """How long a pipeline action waits in all: each step's tries and the backoffs between them
    (the members run their steps at once, each waiting for its own)."""
    return sum(step.longest_wait() for step in pipeline_of(action, "", []))


def what_it_sends(action: Action) -> str:
    """For drawings: its type, or a pipeline's steps (``pipeline insert → bench``), and what
    the workflow model adds: to whom a fan-out sends, what undoes it."""
    if action.pipeline is None:
        what = action.type_id
    else:
        names = [step.get("name") for step in action.pipeline if isinstance(step, Mapping)]
        what = "pipeline " + " → ".join(str(name) for name in names)
    if isinstance(action.fan_out, Mapping):
        what += f" to each member ({action.fan_out.get('policy', 'all')})"
    if isinstance(action.compensation, Mapping):
        what += f" | undo: {action.compensation.get('name', f'{action.name}.undo')}"
    return what


def pipeline_problems(recipe: Recipe) -> list[str]:
    """Every problem of the recipe's pipelines; a step's name is used once, by no action
    either (its runs ``<step>@<member>`` would be another action's member runs)."""
    problems: list[str] = []
    actions = {action.name for action in recipe.actions}
    seen: set[str] = set()
    for index, action in enumerate(recipe.actions):
        where = f"recipe.actions[{index}].pipeline"
        for position, step in enumerate(pipeline_of(action, where, problems)):
            if step.name in actions or step.name in seen:
                problems.append(f"{where}[{position}].name: the name {step.name!r} is used twice")
            seen.add(step.name)
    return problems
