"""The cycle format: recipes checked against ``schema.json``'s rules, compiled, and drawn."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.drawing import column, rows_mermaid, rows_svg
from gateway.formats import ActionSpec, ExecutorOptions, Program, RecipeError, bound
from gateway.recipefields import DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS  # the schema's
from gateway.recipefields import Fields, read_command
from gateway_cycle.executor import CycleExecutor

DATASCHEMA = "https://station-gateway.github.io/schemas/cycle-recipe/v1/"
MAX_CYCLES = 1000
MAX_TIMEOUT_SECONDS = 86400.0
RECIPE_FIELDS = {"commands", "cycles"}
COMMAND_FIELDS = {"name", "type_id", "equipment", "parameters", "timeout_seconds"}


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
        return replace(self, commands=tuple(bound(c, equipment) for c in self.commands))


def _command(item: Any, where: str, problems: list[str]) -> ActionSpec | None:
    """One command, checked with ``gateway.recipefields`` as every format checks its fields."""
    fields = Fields.read(item, where, problems, COMMAND_FIELDS)
    if fields is None:
        return None
    fields.require("name", "type_id")
    found = read_command(fields, longest=MAX_TIMEOUT_SECONDS)
    return ActionSpec(**found) if fields.ok else None


class CycleFormat:
    """``gateway.formats.RecipeFormat`` of cycle recipes."""

    name = "cycle"
    dataschema = DATASCHEMA

    def compile(self, recipe: Any) -> CycleProgram:
        """The program of recipe JSON; ``RecipeError`` names every problem at its element."""
        problems: list[str] = []
        fields = Fields.read(recipe, "recipe", problems, RECIPE_FIELDS)
        if fields is None:
            raise RecipeError(problems)
        fields.require("commands")
        cycles = fields.whole("cycles", 1, maximum=MAX_CYCLES)
        commands: list[ActionSpec] = []
        for index, item in enumerate(fields.items("commands", "commands") or ()):
            where = f"recipe.commands[{index}]"
            command = _command(item, where, problems)
            if command is not None and command.name in {known.name for known in commands}:
                problems.append(f"{where}.name: {command.name!r} is used twice")
            elif command is not None:
                commands.append(command)
        if problems:
            raise RecipeError(problems)
        return CycleProgram(tuple(commands), cycles or 1)

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
