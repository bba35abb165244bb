"""The sequence recipe format on the recipe runtime: a compiled sequence and its executor."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import cached_property
from typing import Any

from gateway.controls import StepEdit
from gateway.drawing import Box, Row, rows_mermaid, rows_svg
from gateway.formats import ActionSpec, Execution, ExecutorOptions, Program, bound
from gateway_sequence.editing import edit_sequence
from gateway_sequence.executor import SequenceExecutor
from gateway_sequence.model import DATASCHEMA, Command, SequenceRecipe, load_sequence


class SequenceProgram:
    """``gateway.formats.Program`` of one sequence: every command step is an action."""

    def __init__(self, recipe: SequenceRecipe) -> None:
        self.recipe = recipe

    @cached_property
    def actions(self) -> Mapping[str, ActionSpec]:
        return {command.name: command.spec() for command in self.recipe.commands()}

    def executor(self, parameters: Mapping[str, Any], options: ExecutorOptions) -> SequenceExecutor:
        # The job's parameters go with each command, and conditions may read them.
        return SequenceExecutor(self.recipe, parameters)

    def bind(self, equipment: Mapping[str, str]) -> SequenceProgram:
        blocks = tuple(
            replace(block, commands=tuple(bound(c, equipment) for c in block.commands))
            for block in self.recipe.blocks
        )
        return SequenceProgram(replace(self.recipe, blocks=blocks))


class SequenceFormat:
    """``gateway.formats.RecipeFormat`` of sequences: ordered steps with ``par`` blocks."""

    name = "sequence"
    dataschema = DATASCHEMA

    def compile(self, recipe: Any) -> SequenceProgram:
        return SequenceProgram(load_sequence(recipe))

    def recognizes(self, recipe: Any) -> bool:
        # "steps" alone: an SFC chart has steps too, with transitions, actions or branches.
        return (
            isinstance(recipe, Mapping)
            and "steps" in recipe
            and not {"transitions", "actions", "branches"} & recipe.keys()
        )

    def summary(self, program: Program) -> str:
        recipe = _recipe(program)
        parallel = sum(block.parallel for block in recipe.blocks)
        return f"OK: {len(recipe.blocks)} blocks ({parallel} par), {len(program.actions)} steps"

    def render_svg(self, program: Program, active: Collection[str] = ()) -> str:
        return rows_svg(_rows(_recipe(program)), active, kind="sequence")

    def render_mermaid(self, program: Program) -> str:
        return rows_mermaid(_rows(_recipe(program)))

    def edit_steps(self, recipe: Any, edit: StepEdit, execution: Execution | None) -> Any:
        return edit_sequence(recipe, edit, execution)


def _rows(recipe: SequenceRecipe) -> list[Row]:
    """A row per block, a ``par`` block's side by side; a box names where its command goes."""
    return [
        Row(block.name, [Box(c.name, _detail(c)) for c in block.commands], block.parallel)
        for block in recipe.blocks
    ]


def _detail(command: Command) -> str:
    """Where the command goes, and what the workflow model adds to it: the members of a
    fan-out (or a pipeline's steps), the condition, its tries, what undoes it."""
    if command.pipeline:
        where = "per member: " + " > ".join(step.name for step in command.pipeline)
    elif command.fan_out is not None:
        where = f"to each member ({command.fan_out.policy})"
    else:
        where = command.equipment or command.type_id
    parts = [where]
    if command.condition is not None:
        parts.append(f"if {command.condition.text}")
    if command.max_attempts > 1 and not command.pipeline:
        apart = f", {command.backoff_seconds:g} s apart" if command.backoff_seconds else ""
        parts.append(f"{command.max_attempts} tries{apart}")
    if command.compensation is not None:
        parts.append(f"undo: {command.compensation.name}")
    return " | ".join(parts)


def _recipe(program: Program) -> SequenceRecipe:
    if not isinstance(program, SequenceProgram):
        raise TypeError(f"not a sequence program: {type(program).__name__}")
    return program.recipe
