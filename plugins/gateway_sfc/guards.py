"""An SFC action's ``condition`` and ``assertion`` (the language of transitions).

- ``condition``: looked at when the action's step is entered and the action is due: false, and
  the action is skipped (nothing sent; done, with "skipped: ..." as its error, so the step may
  be left). It reads actions' results (``<action>.<field>``), parameters and named conditions.
- ``assertion``: looked at on the action's reply; its fields are named bare. False: the try
  failed with ``assertion failed: <text>`` (retried by the action's retry policy, then its
  ``on_error``).

A condition that cannot be decided (a field a result lacks) is a step error, as for
transitions. Problems are named at their path: ``recipe.actions[2].assertion: ...``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from gateway import conditions
from gateway.conditions import Condition, ConditionError, ConditionScope, parse_condition
from gateway_sfc.model import Action, Recipe


@lru_cache(maxsize=1024)
def _parsed(text: str) -> Condition:
    return parse_condition(text)


def condition_of(action: Action) -> Condition | None:
    return None if action.condition is None else _parsed(action.condition)


def assertion_of(action: Action) -> Condition | None:
    return None if action.assertion is None else _parsed(action.assertion)


def skip_reason(action: Action, scope: ConditionScope) -> str | None:
    """Why ``action`` is skipped (``None``: it runs); ``ConditionError`` when undecidable."""
    return conditions.skip_reason(condition_of(action), scope)


def assertion_error(action: Action, scope: ConditionScope, data: Any) -> str | None:
    """The error of a reply ``action``'s assertion refuses (``None``: it holds)."""
    return conditions.assertion_error(assertion_of(action), action.name, scope, data)


def guard_problems(recipe: Recipe) -> list[str]:
    """Every problem of the actions' conditions and assertions, named at its path."""
    problems: list[str] = []
    actions = {action.name for action in recipe.actions}
    named = set(recipe.conditions)
    for index, action in enumerate(recipe.actions):
        for field, text in (("condition", action.condition), ("assertion", action.assertion)):
            if text is None:
                continue
            where = f"recipe.actions[{index}].{field}"
            try:
                condition = parse_condition(text)
            except ConditionError as error:
                problems.append(f"{where}: {error.reason}")
                continue
            for reference in condition.references():
                if reference.kind == "elapsed":
                    problems.append(f"{where}: step.elapsed is for transitions")
                elif reference.kind == "result" and reference.name not in actions:
                    problems.append(f"{where}: {reference.name!r} names no action")
                elif (
                    reference.kind == "bare"
                    and field == "condition"
                    and reference.name not in named
                ):
                    problems.append(
                        f"{where}: {reference.name!r} names no named condition: write "
                        "<action>.<field> (a condition is looked at before the action runs)"
                    )
    return problems
