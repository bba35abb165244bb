"""The ``compensation`` of an SFC action: what undoes it when the job fails.

``gateway.compensation`` says how the runtime runs it.

Only an action that sends a command that may change things can have one: a ``pull_event``
action sends nothing, an R association only resets, an action with ``side_effects: false``
changes nothing. Problems are named at their path, ``recipe.actions[2].compensation.type_id``.
"""

from __future__ import annotations

from gateway.compensation import compensation_problems, load_compensation
from gateway.fanout import FanOut, load_fan_out
from gateway.formats import ActionSpec
from gateway_sfc.model import Action, Interaction, Qualifier, Recipe


def compensation_of(action: Action, where: str, problems: list[str]) -> ActionSpec | None:
    """The action's compensation (``None``: it has none, or it has problems, added to
    ``problems``)."""
    if action.compensation is None:
        return None
    cannot = _why_none(action)
    if cannot is not None:
        problems.append(f"{where}: {cannot}")
    return load_compensation(
        action.compensation, where, action.name, problems, timeout=action.timeout_seconds
    )


def fan_out_of(action: Action, where: str, problems: list[str]) -> FanOut | None:
    """The action's fan-out (``None``: none, or problems, added to ``problems``)."""
    if action.fan_out is None:
        return None
    if action.qualifier is Qualifier.R or action.interaction is Interaction.PULL_EVENT:
        problems.append(f"{where}: only a push_command action sends to a set of equipment")
    if action.equipment is not None:
        problems.append(f"{where}: a fan-out action names no equipment (its members are)")
    return load_fan_out(action.fan_out, where, problems)


def _why_none(action: Action) -> str | None:
    if action.qualifier is Qualifier.R:
        return "an R association only resets its action: it cannot have a compensation"
    if action.interaction is Interaction.PULL_EVENT:
        return "a pull_event action sends nothing: it cannot have a compensation"
    if not action.has_side_effects:
        return "the action has side_effects false: it changes nothing that could be undone"
    return None


def compensation_check(recipe: Recipe, specs: dict[str, ActionSpec]) -> list[str]:
    """Every problem of the recipe's compensations; ``specs`` (action name -> its spec as the
    program lists it) lets names that clash be found."""
    problems: list[str] = []
    for index, action in enumerate(recipe.actions):
        compensation_of(action, f"recipe.actions[{index}].compensation", problems)
        fan_out_of(action, f"recipe.actions[{index}].fan_out", problems)
    if not problems:
        problems.extend(compensation_problems(specs))
    return problems
