"""The cycle format: recipes checked against ``schema.json``'s rules, compiled, and drawn."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.drawing import column, rows_mermaid, rows_svg
from gateway.formats import ActionSpec, ExecutorOptions, Program, RecipeError
from gateway_cycle.executor import CycleExecutor

DATASCHEMA = "https://station-gateway.github.io/schemas/cycle-recipe/v1/"
DEFAULT_TIMEOUT_SECONDS = 60.0
# A name is part of its command's correlation id ``{job}:{name}:{attempt}``: no colon.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# Each field: whether a value is right, and what a right one is (the problem's text says).
Check = tuple[Callable[[Any], bool], str]
RECIPE_FIELDS: dict[str, Check] = {
    "commands": (lambda v: isinstance(v, list) and bool(v), "a non-empty list of commands"),
    "cycles": (lambda v: type(v) is int and 1 <= v <= 1000, "a whole number from 1 to 1000"),
}
COMMAND_FIELDS: dict[str, Check] = {
    "name": (lambda v: isinstance(v, str) and bool(_NAME.match(v)), "1-64 letters, digits, _.-"),
    "type_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "equipment": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "parameters": (lambda v: isinstance(v, dict), "a JSON object"),
    "timeout_seconds": (
        lambda v: type(v) in (int, float) and 0 < v <= 86400,
        "seconds, > 0 and <= 86400",
    ),
}


@dataclass(frozen=True)
class CycleProgram:
    """``gateway.formats.Program`` of one cycle recipe: each command is an action."""

    commands: tuple[ActionSpec, ...]
    cycles: int = 1

    @property
    def actions(self) -> Mapping[str, ActionSpec]:
        return {command.name: command for command in self.commands}

    def executor(self, parameters: Mapping[str, Any], options: ExecutorOptions) -> CycleExecutor:
        # The job's parameters go with every command: the rules do not depend on them.
        return CycleExecutor(self.commands, self.cycles)

    def bind(self, equipment: Mapping[str, str]) -> CycleProgram:
        commands = tuple(
            replace(c, equipment=equipment.get(c.name)) if c.equipment is None else c
            for c in self.commands
        )
        return replace(self, commands=commands)


def _check(data: Any, fields: dict[str, Check], required: set[str], where: str) -> list[str]:
    if not isinstance(data, Mapping):
        return [f"{where}: must be a JSON object"]
    problems = [f"{where}.{key}: required" for key in sorted(required - data.keys())]
    for key, value in data.items():
        if key not in fields:
            problems.append(f"{where}: unknown field {key!r} (fields: {', '.join(fields)})")
        elif not fields[key][0](value):
            problems.append(f"{where}.{key}: must be {fields[key][1]}, got {value!r}")
    return problems


class CycleFormat:
    """``gateway.formats.RecipeFormat`` of cycle recipes."""

    name = "cycle"
    dataschema = DATASCHEMA

    def compile(self, recipe: Any) -> CycleProgram:
        """The program of recipe JSON; ``RecipeError`` names every problem at its element."""
        problems = _check(recipe, RECIPE_FIELDS, {"commands"}, "recipe")
        items = recipe.get("commands") if isinstance(recipe, Mapping) else None
        commands: list[ActionSpec] = []
        for index, item in enumerate(items if isinstance(items, list) else []):
            where = f"recipe.commands[{index}]"
            found = _check(item, COMMAND_FIELDS, {"name", "type_id"}, where)
            if not found and item["name"] in {command.name for command in commands}:
                found = [f"{where}.name: {item['name']!r} is used twice"]
            problems += found
            if not found:
                commands.append(ActionSpec(**{"timeout_seconds": DEFAULT_TIMEOUT_SECONDS, **item}))
        if problems:
            raise RecipeError(problems)
        return CycleProgram(tuple(commands), recipe.get("cycles", 1))

    def recognizes(self, recipe: Any) -> bool:
        return isinstance(recipe, Mapping) and "commands" in recipe

    def summary(self, program: Program) -> str:
        assert isinstance(program, CycleProgram)
        return f"OK: {len(program.commands)} commands, {program.cycles} cycles"

    def render_svg(self, program: Program, active: Collection[str] = ()) -> str:
        return rows_svg(column(list(program.actions)), active, kind="cycle")

    def render_mermaid(self, program: Program) -> str:
        assert isinstance(program, CycleProgram)
        loop = f"{program.cycles} cycles" if program.cycles > 1 else None  # back to the first
        return rows_mermaid(column(list(program.actions)), loop)
