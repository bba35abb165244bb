"""Recipes for tests and benchmarks of the SFC engine (not used by the engine itself)."""

from __future__ import annotations

from typing import Any


def linear_recipe(
    steps: int,
    *,
    type_id: str = "bench",
    equipment: str | None = None,
    timeout_seconds: float | None = None,
) -> dict[str, Any]:
    """A chart of ``steps`` steps in a row (``S0`` ... then ``Done``), each sending one
    ``push_command`` (action ``a<n>``) of ``type_id`` to ``equipment`` and waiting for its reply."""
    names = [f"S{index}" for index in range(steps)]
    action: dict[str, Any] = {"interaction": "push_command", "type_id": type_id}
    if equipment is not None:
        action["equipment"] = equipment
    if timeout_seconds is not None:
        action["timeout_seconds"] = timeout_seconds
    return {
        "steps": [{"name": name, "initial": name == names[0]} for name in [*names, "Done"]],
        "transitions": [
            {"source": a, "target": b} for a, b in zip(names, [*names[1:], "Done"], strict=True)
        ],
        "actions": [
            {"name": f"a{index}", "step": name, **action} for index, name in enumerate(names)
        ],
    }
