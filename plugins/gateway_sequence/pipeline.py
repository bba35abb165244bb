"""A sequence's per-member pipeline: a list of steps each member of a fan-out runs on its own.

    {"name": "per_slot", "fan_out": {"members": ["slot1", "slot2"], "policy": "any"},
     "steps": [{"name": "insert", "type_id": "..."}, {"name": "test", "type_id": "..."}]}

Each member runs the steps one after the other, independently of the others (the runtime's
``FanOutExecutor``); a member whose step failed (after that step's ``max_attempts``) stops its
own pipeline; the fan-out's policy decides the block. Its steps are command steps that name no
equipment (the member is their equipment) and have no condition, assertion, compensation or
fan-out of their own. The block's result is, per member, its steps' results by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.fanout import load_fan_out
from gateway.formats import ActionSpec

PIPELINE_FIELDS = {"name", "fan_out", "steps", "on_error", "continue_on_error"}
# What a pipeline's step may not have: the member is its equipment, and the rest is the
# block's (or not supported per member).
NOT_IN_PIPELINE = ("equipment", "condition", "assertion", "compensation", "fan_out", "on_error")

Loader = Callable[[Mapping[str, Any], str], Any]  # a command step, or None (problems added)


def load_pipeline(
    step: Mapping[str, Any], where: str, load_command: Loader, problems: list[str]
) -> tuple[Any, tuple[Any, ...]] | None:
    """``(fan_out, steps)`` of a pipeline block (its steps loaded by ``load_command``)."""
    for key in step:
        if key not in PIPELINE_FIELDS:
            known = ", ".join(sorted(PIPELINE_FIELDS))
            problems.append(f"{where}: unknown field {key!r} (fields: {known})")
    if "fan_out" not in step:
        problems.append(f"{where}: a block of 'steps' runs per member: it needs a 'fan_out'")
        return None
    fan_out = load_fan_out(step["fan_out"], f"{where}.fan_out", problems)
    steps = step["steps"]
    if not isinstance(steps, list) or not steps:
        problems.append(f"{where}.steps: must be a non-empty list of command steps")
        return None
    loaded = []
    for position, inner in enumerate(steps):
        at = f"{where}.steps[{position}]"
        if not isinstance(inner, Mapping) or "par" in inner or "steps" in inner:
            problems.append(f"{at}: must be a command step (no par block or pipeline in it)")
            continue
        for field in NOT_IN_PIPELINE:
            if field in inner:
                problems.append(f"{at}.{field}: not for a pipeline's step (the block's own)")
        command = load_command(inner, at)
        if command is not None:
            loaded.append(command)
    return (fan_out, tuple(loaded)) if fan_out is not None else None


def step_specs(commands: tuple[Any, ...]) -> tuple[ActionSpec, ...]:
    """A pipeline's steps as the runtime sends them."""
    return tuple(
        ActionSpec(
            name=command.name,
            type_id=command.type_id,
            parameters=command.parameters,
            timeout_seconds=command.timeout_seconds,
            max_attempts=command.max_attempts,
            side_effects=command.side_effects,
            backoff_seconds=command.backoff_seconds,
        )
        for command in commands
    )
