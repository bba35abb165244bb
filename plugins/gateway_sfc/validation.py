"""Static validation of SFC recipes: everything that can be checked before a job runs.

Job management calls this when a Work Master is configured and when a job is stored, so a
recipe that could fail halfway is refused up front, with every problem named at once.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import ValidationError
from gateway.formats import ActionSpec
from gateway.routing import EquipmentUse
from gateway_sfc.chart import Chart, RecipeError, compile_chart
from gateway_sfc.compensation import compensation_check, compensation_of
from gateway_sfc.guards import guard_problems
from gateway_sfc.model import Interaction, Qualifier, Recipe, load_recipe
from gateway_sfc.pipeline import pipeline_problems


def load_chart(data: Any) -> Chart:
    """The executable chart of recipe JSON data; ``RecipeError`` lists every problem."""
    try:
        recipe = load_recipe(data)
    except ValidationError as error:
        # Shape and type errors stop before the chart can be looked at.
        raise RecipeError(_load_problems(error)) from None
    try:
        chart = compile_chart(recipe)
    except RecipeError as error:
        more = [*_compensation_problems(recipe), *guard_problems(recipe)]
        raise RecipeError([*error.problems, *more, *pipeline_problems(recipe)]) from None
    problems = [*_compensation_problems(recipe), *guard_problems(recipe)]
    problems += pipeline_problems(recipe)
    if problems:
        raise RecipeError(problems)
    return chart


def _compensation_problems(recipe: Recipe) -> list[str]:
    uses = {action.name: action for action in recipe.actions if action.qualifier is not Qualifier.R}
    specs = {
        name: ActionSpec(name, action.type_id, compensation=compensation_of(action, "", []))
        for name, action in uses.items()
    }
    return compensation_check(recipe, specs)


def _load_problems(error: ValidationError) -> list[str]:
    """The loader's problems one by one (it joins them as ``first; recipe.x: second; ...``)."""
    first, *others = error.reason.split("; ")
    problems = [f"{error.element}: {first}"]
    for part in others:
        if part.startswith("recipe") and ": " in part:
            problems.append(part)
        else:
            problems[-1] += "; " + part
    return problems


def validate_recipe(data: Any) -> list[str]:
    """Every problem of recipe JSON data, each ``"<element>: <reason>"``; empty when valid."""
    try:
        load_chart(data)
    except RecipeError as error:
        return list(error.problems)
    return []


def recipe_equipment_uses(recipe: Recipe) -> list[EquipmentUse]:
    """The actions that send a command or wait for an event (an R association only resets)."""
    return [
        EquipmentUse(
            action.name,
            action.type_id,
            action.equipment,
            command=action.interaction is Interaction.PUSH_COMMAND,
        )
        for action in recipe.actions
        if action.qualifier is not Qualifier.R
    ]


def equipment_uses(data: Any) -> list[EquipmentUse]:
    """What recipe JSON data asks of equipment; empty when it does not load (``validate_recipe``
    names why)."""
    try:
        return recipe_equipment_uses(load_chart(data).recipe)
    except RecipeError:
        return []
