"""The SFC recipe format on the recipe runtime: a compiled chart and its executor."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import cached_property
from typing import Any

from gateway.controls import StepEdit
from gateway.formats import ActionSpec, Execution, ExecutorOptions, Program
from gateway_sfc.chart import Chart, compile_chart
from gateway_sfc.compensation import compensation_of, fan_out_of
from gateway_sfc.editing import edit_chart
from gateway_sfc.engine import Executor
from gateway_sfc.model import DATASCHEMA, Action, Qualifier
from gateway_sfc.pipeline import pipeline_of
from gateway_sfc.render import render_mermaid
from gateway_sfc.svg import render_svg
from gateway_sfc.validation import load_chart


class SfcProgram:
    """``gateway.formats.Program`` of one compiled chart."""

    def __init__(self, chart: Chart) -> None:
        self.chart = chart

    @cached_property
    def actions(self) -> Mapping[str, ActionSpec]:
        recipe = self.chart.recipe
        return {
            action.name: _spec(action, recipe.retry_of(action).max_attempts)
            for action in recipe.actions
            if action.qualifier is not Qualifier.R  # R only resets another action
        }

    def executor(self, parameters: Mapping[str, Any], options: ExecutorOptions) -> Executor:
        return Executor(self.chart, parameters, options.recheck_seconds, options.liveness_seconds)

    def bind(self, equipment: Mapping[str, str]) -> SfcProgram:
        recipe = self.chart.recipe
        actions = [
            replace(action, equipment=equipment[action.name])
            if action.name in equipment
            and action.equipment is None
            and action.qualifier is not Qualifier.R
            else action
            for action in recipe.actions
        ]
        return SfcProgram(compile_chart(replace(recipe, actions=actions)))


def _spec(action: Action, max_attempts: int) -> ActionSpec:
    """The action as the runtime sees it (the recipe was checked: its compensation and its
    pipeline load)."""
    pipeline = pipeline_of(action, "", [])
    return ActionSpec(
        name=action.name,
        # A pipeline's "declared" members are the equipment declaring its first step's type.
        type_id=pipeline[0].type_id if pipeline else action.type_id,
        interaction=action.interaction,
        equipment=action.equipment,
        parameters=action.parameters,
        timeout_seconds=action.timeout_seconds,
        max_attempts=max_attempts,
        side_effects=action.has_side_effects,
        compensation=compensation_of(action, "", []),
        fan_out=fan_out_of(action, "", []),
        pipeline=pipeline,
    )


class SfcFormat:
    """``gateway.formats.RecipeFormat`` of IEC 61131-3 Sequential Function Charts."""

    name = "sfc"
    dataschema = DATASCHEMA

    def compile(self, recipe: Any) -> SfcProgram:
        return SfcProgram(load_chart(recipe))

    def recognizes(self, recipe: Any) -> bool:
        if not isinstance(recipe, Mapping):
            return False
        steps = recipe.get("steps")
        initial = isinstance(steps, list) and any(
            isinstance(step, Mapping) and "initial" in step for step in steps
        )
        return initial or bool({"transitions", "actions", "branches"} & recipe.keys())

    def summary(self, program: Program) -> str:
        recipe = _chart(program).recipe
        return (
            f"OK: {len(recipe.steps)} steps, {len(recipe.transitions)} transitions, "
            f"{len(recipe.actions)} actions"
        )

    def render_svg(self, program: Program, active: Collection[str] = ()) -> str:
        return render_svg(_chart(program), active)

    def render_mermaid(self, program: Program) -> str:
        return render_mermaid(_chart(program))

    def edit_steps(self, recipe: Any, edit: StepEdit, execution: Execution | None) -> Any:
        return edit_chart(recipe, edit, execution)


def _chart(program: Program) -> Chart:
    if not isinstance(program, SfcProgram):
        raise TypeError(f"not an SFC program: {type(program).__name__}")
    return program.chart
