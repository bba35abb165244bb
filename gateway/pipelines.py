"""A fan-out's per-member pipeline read from recipe JSON, the same way in every format.

A pipeline is a list of steps each member of a fan-out runs one after the other, on its own
(the runtime's ``FanOutExecutor``). A step is a command to its member: ``PIPELINE_STEP_FIELDS``,
read as every command is (``gateway.recipefields.read_command``); it names no equipment (the
member is its equipment). Problems are named at their path, ``<where>[1].type_id: ...``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gateway.formats import ActionSpec
from gateway.recipefields import Fields, read_command

PIPELINE_STEP_FIELDS = {
    "name",
    "type_id",
    "parameters",
    "timeout_seconds",
    "max_attempts",
    "backoff_seconds",
    "side_effects",
}


def load_pipeline(
    value: Any,
    where: str,
    problems: list[str],
    defaults: Mapping[str, Any] = {},
    *,
    blocks: Collection[str] = (),
) -> tuple[ActionSpec, ...]:
    """The steps of the pipeline ``value`` at ``where`` (those without problems; the others
    are added to ``problems``). ``defaults``: of the steps' fields (the recipe's timeout);
    ``blocks``: fields a step may not have because they are its block's, said so."""
    if not isinstance(value, list) or not value:
        problems.append(f"{where}: must be a non-empty list of steps")
        return ()
    steps = []
    for position, item in enumerate(value):
        at = f"{where}[{position}]"
        known = PIPELINE_STEP_FIELDS | set(blocks)
        fields = Fields.read(item, at, problems, known, "a JSON object with 'name' and 'type_id'")
        if fields is None:
            continue
        for key in blocks:
            if key in item:
                fields.problem(key, "not for a pipeline's step (the block's own)")
        found = read_command(fields, defaults)
        if fields.ok:
            steps.append(ActionSpec(**found))
    return tuple(steps)
