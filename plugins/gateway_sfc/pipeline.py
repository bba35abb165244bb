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

import math
import re
from collections.abc import Mapping
from typing import Any

from gateway.formats import ActionSpec
from gateway_sfc.model import Action, Recipe

STEP_FIELDS = {
    "name",
    "type_id",
    "parameters",
    "timeout_seconds",
    "max_attempts",
    "backoff_seconds",
    "side_effects",
}
# A step's name is part of its runs' names and correlation ids (``<job>:<step>@<member>:<n>``).
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
DEFAULT_TIMEOUT_SECONDS = 60.0  # a member never waits forever


def pipeline_of(action: Action, where: str, problems: list[str]) -> tuple[ActionSpec, ...]:
    """The action's pipeline steps (empty: none, or problems, added to ``problems``)."""
    if action.pipeline is None:
        return ()
    if action.fan_out is None:
        problems.append(f"{where}: a pipeline runs per member: the action needs a fan_out")
    if action.type_id:
        problems.append(f"{where}: leave the action's type_id out (each step has its own)")
    if action.compensation is not None:
        problems.append(f"{where}: a pipeline action cannot have a compensation")
    if not isinstance(action.pipeline, list) or not action.pipeline:
        problems.append(f"{where}: must be a non-empty list of steps")
        return ()
    steps = [
        _step(value, f"{where}[{position}]", action.timeout_seconds, problems)
        for position, value in enumerate(action.pipeline)
    ]
    return tuple(step for step in steps if step is not None)


def _step(value: Any, where: str, timeout: float | None, problems: list[str]) -> ActionSpec | None:
    if not isinstance(value, Mapping):
        problems.append(f"{where}: must be a JSON object with 'name' and 'type_id'")
        return None
    before = len(problems)
    for key in value:
        if key not in STEP_FIELDS:
            known = ", ".join(sorted(STEP_FIELDS))
            problems.append(f"{where}: unknown field {key!r} (fields: {known})")
    name, type_id = value.get("name"), value.get("type_id")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(
            f"{where}.name: must be 1-64 letters, digits or _.- characters, got {name!r}"
        )
    if not isinstance(type_id, str) or not type_id:
        problems.append(f"{where}.type_id: must be a non-empty string, got {type_id!r}")
    parameters = value.get("parameters", {})
    if not isinstance(parameters, Mapping):
        problems.append(f"{where}.parameters: must be a JSON object")
    seconds = value.get("timeout_seconds", timeout or DEFAULT_TIMEOUT_SECONDS)
    if not _is_number(seconds) or seconds <= 0:
        problems.append(
            f"{where}.timeout_seconds: must be a number of seconds > 0, got {seconds!r}"
        )
    attempts = value.get("max_attempts", 1)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        problems.append(f"{where}.max_attempts: must be a whole number >= 1, got {attempts!r}")
    backoff = value.get("backoff_seconds", 0.0)
    if not _is_number(backoff) or backoff < 0:
        problems.append(
            f"{where}.backoff_seconds: must be a number of seconds >= 0, got {backoff!r}"
        )
    side_effects = value.get("side_effects", True)
    if not isinstance(side_effects, bool):
        problems.append(f"{where}.side_effects: must be true or false")
    if len(problems) > before:
        return None
    return ActionSpec(
        name=str(name),
        type_id=str(type_id),
        parameters=dict(parameters),
        timeout_seconds=float(seconds),
        max_attempts=attempts,
        side_effects=side_effects,
        backoff_seconds=float(backoff),
    )


def pipeline_timeout(action: Action) -> float:
    """How long a pipeline action waits in all: each step's wait, for each of its tries, and
    the backoffs between them (the members run their steps at once, each waiting for its own)."""
    steps = pipeline_of(action, "", [])
    return sum(
        (step.timeout_seconds or 0.0) * step.max_attempts
        + step.backoff_seconds * (step.max_attempts - 1)
        for step in steps
    )


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


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


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
