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

from gateway.fanout import FanOut, load_fan_out
from gateway.recipefields import Fields

PIPELINE_FIELDS = {"name", "fan_out", "steps", "on_error", "continue_on_error"}
# What a pipeline's step may not have: the member is its equipment, and the rest is the
# block's (or not supported per member).
NOT_IN_PIPELINE = ("equipment", "condition", "assertion", "compensation", "fan_out", "on_error")

Loader = Callable[[Mapping[str, Any], str], Any]  # a command step, or None (problems added)


def load_pipeline(fields: Fields, load_command: Loader) -> tuple[FanOut, tuple[Any, ...]] | None:
    """``(fan_out, steps)`` of a pipeline block (its steps loaded by ``load_command``)."""
    if "fan_out" not in fields.value:
        fields.problems.append(
            f"{fields.where}: a block of 'steps' runs per member: it needs a 'fan_out'"
        )
        return None
    fan_out = load_fan_out(fields.value["fan_out"], fields.path("fan_out"), fields.problems)
    loaded = []
    for position, inner in enumerate(fields.items("steps", "command steps") or ()):
        at = f"{fields.where}.steps[{position}]"
        if not isinstance(inner, Mapping) or "par" in inner or "steps" in inner:
            fields.problems.append(f"{at}: must be a command step (no par block or pipeline in it)")
            continue
        for field in NOT_IN_PIPELINE:
            if field in inner:
                fields.problems.append(f"{at}.{field}: not for a pipeline's step (the block's own)")
        command = load_command(inner, at)
        if command is not None:
            loaded.append(command)
    return (fan_out, tuple(loaded)) if fan_out is not None and loaded else None
