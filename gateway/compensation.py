"""Compensation: what undoes an action, declared by a recipe, run by the runtime on failure.

An action that changes the product or the equipment may declare its **compensation**, a command
that undoes it (unclamp for clamp, retract for extend). When a job fails, or the MES aborts it,
the recipe runtime runs the compensations of the actions that completed, the last completed
first (the actions of one step or ``par`` block are undone at once), then ends the job:

- ``FAILED_SAFE``: every compensation succeeded, and no action that may change things and has
  no compensation completed. The Job Response's ``SideEffects`` is false.
- ``FAILED_UNSAFE``: a compensation failed (the ones before it in the order are not run: what
  they would undo may not be safe to move any more), or something was done that nothing undoes.
  ``SideEffects`` is true.

The job ends in OPC 40001-3's Aborted as before; the Job Response adds the entries ``Rollback``
(``FAILED_SAFE`` / ``FAILED_UNSAFE``) and ``Compensations`` (each compensation: the action it
undoes, its name, ``done`` / ``failed`` / ``not run``, its error). The failed action itself is
not undone: its equipment said it failed, or did not answer.

A format declares a compensation as ``ActionSpec.compensation``; ``load_compensation`` reads the
recipe's ``compensation`` object the same way in every format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.formats import ActionSpec, Program
from gateway.recipefields import DEFAULT_TIMEOUT_SECONDS, Fields, read_command

ROLLBACK_ID = "Rollback"
"""``ID`` of the Job Response entry saying how the rollback of a failed job ended."""
COMPENSATIONS_ID = "Compensations"
"""``ID`` of the Job Response entry listing the compensations, what ran and what failed."""
SIDE_EFFECTS_ID = "SideEffects"
"""``ID`` of the Job Response entry job management writes when a job fails (and the runtime
after a rollback of a job the MES aborted)."""
FAILED_SAFE = "FAILED_SAFE"
FAILED_UNSAFE = "FAILED_UNSAFE"

COMPENSATION_FIELDS = {
    "name",
    "type_id",
    "equipment",
    "parameters",
    "timeout_seconds",
    "max_attempts",
}


def load_compensation(
    value: Any, where: str, action: str, problems: list[str], *, timeout: float | None = None
) -> ActionSpec | None:
    """The compensation of ``action`` from its recipe JSON ``value`` (at ``where``); problems
    are added to ``problems``, each named at its field. ``timeout``: the default wait for its
    reply (the action's own), else 60 s: a rollback never waits forever."""
    fields = Fields.read(
        value, where, problems, COMPENSATION_FIELDS, "a JSON object with at least 'type_id'"
    )
    if fields is None:
        return None
    defaults = {"name": f"{action}.undo", "timeout_seconds": timeout or DEFAULT_TIMEOUT_SECONDS}
    found = read_command(fields, defaults)
    return ActionSpec(**found) if fields.ok else None


def compensation_problems(program_actions: Mapping[str, ActionSpec]) -> list[str]:
    """Names that clash: a compensation named as an action, or two compensations alike."""
    problems = []
    seen: dict[str, str] = {}
    for spec in program_actions.values():
        if spec.compensation is None:
            continue
        name = spec.compensation.name
        if name in program_actions:
            problems.append(f"action {spec.name}: its compensation's name {name!r} names an action")
        elif name in seen:
            problems.append(
                f"action {spec.name}: its compensation's name {name!r} is the compensation of "
                f"{seen[name]} too"
            )
        seen.setdefault(name, spec.name)
    return problems


def compensations(program: Program) -> dict[str, tuple[str, ActionSpec]]:
    """Every compensation of ``program`` by name: the action it undoes and its spec, sent to its
    action's equipment when it names none (the action's as routed when the job started)."""
    found = {}
    for spec in program.actions.values():
        compensation = spec.compensation
        if compensation is None:
            continue
        if compensation.equipment is None and spec.equipment is not None:
            compensation = replace(compensation, equipment=spec.equipment)
        found[compensation.name] = (spec.name, compensation)
    return found


def compensates(program: Program) -> bool:
    """Whether any action of ``program`` declares a compensation."""
    return any(spec.compensation is not None for spec in program.actions.values())
