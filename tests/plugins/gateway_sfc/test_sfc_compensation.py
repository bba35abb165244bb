"""An SFC action's ``compensation``: loaded into the program, every problem named at its path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.compensation import COMPENSATION_FIELDS
from gateway.testing.jsonschema import schema_errors
from gateway_sfc.format import SfcFormat
from gateway_sfc.validation import validate_recipe

ROOT = Path(__file__).resolve().parents[3]
SCHEMA: dict[str, Any] = json.loads((ROOT / "schemas" / "sfc_recipe.schema.json").read_text())


def chart(**clamp: Any) -> dict[str, Any]:
    """Clamp, then tighten; ``clamp`` changes the clamp action."""
    return {
        "steps": [{"name": "Clamp", "initial": True}, {"name": "Tighten"}],
        "transitions": [{"source": "Clamp", "target": "Tighten"}],
        "actions": [
            {
                "name": "clamp",
                "step": "Clamp",
                "interaction": "push_command",
                "type_id": "com.example.clamp.v1",
                "equipment": "clamp1",
                "timeout_seconds": 3,
                **clamp,
            },
            {
                "name": "tighten",
                "step": "Tighten",
                "interaction": "push_command",
                "type_id": "com.example.tighten.v1",
            },
        ],
    }


def test_a_compensation_is_part_of_its_actions_spec() -> None:
    undo = {"Name": "unclamp", "TypeId": "com.example.unclamp.v1", "Parameters": {"Force": 1}}
    program = SfcFormat().compile(chart(compensation=undo))
    compensation = program.actions["clamp"].compensation
    assert compensation is not None
    assert compensation.name == "unclamp"
    assert compensation.type_id == "com.example.unclamp.v1"
    assert compensation.parameters == {"Force": 1}  # its keys kept as written
    assert compensation.timeout_seconds == 3  # the action's
    assert compensation.equipment is None  # the runtime sends it to the action's
    assert program.actions["tighten"].compensation is None
    assert set(SCHEMA["$defs"]["Compensation"]["properties"]) == COMPENSATION_FIELDS
    assert schema_errors(chart(compensation={"name": "unclamp", "type_id": "t"}), SCHEMA) == []


@pytest.mark.parametrize(
    ("clamp", "problem"),
    [
        (
            {"compensation": {"name": "undo"}},
            "recipe.actions[0].compensation.type_id: must be a non-empty string, got None",
        ),
        (
            {"compensation": {"type_id": "t", "max_attempts": 0}},
            "recipe.actions[0].compensation.max_attempts: must be a whole number >= 1, got 0",
        ),
        (
            {"compensation": {"type_id": "t", "name": "a:b"}},
            "recipe.actions[0].compensation.name: must be 1-64 letters",
        ),
        (
            {"interaction": "pull_event", "compensation": {"type_id": "t"}},
            "recipe.actions[0].compensation: a pull_event action sends nothing",
        ),
        (
            {"side_effects": False, "compensation": {"type_id": "t"}},
            "recipe.actions[0].compensation: the action has side_effects false",
        ),
        (
            {"compensation": {"type_id": "t", "name": "tighten"}},
            "action clamp: its compensation's name 'tighten' names an action",
        ),
    ],
)
def test_a_bad_compensation_is_named_at_its_path(clamp: dict[str, Any], problem: str) -> None:
    problems = validate_recipe(chart(**clamp))
    assert any(found.startswith(problem) for found in problems), problems


def test_compensation_problems_come_with_the_charts_own() -> None:
    recipe = chart(compensation={"type_id": ""})
    recipe["transitions"].append({"source": "Tighten", "target": "Nowhere"})
    problems = validate_recipe(recipe)
    assert "transition Tighten -> Nowhere: target 'Nowhere' is neither a step nor a branch" in (
        problems
    )
    assert "recipe.actions[0].compensation.type_id: must be a non-empty string, got ''" in problems


@pytest.mark.parametrize(
    ("clamp", "problem"),
    [
        (
            {"interaction": "pull_event", "equipment": None, "fan_out": {}},
            "recipe.actions[0].fan_out: only a push_command action sends to a set of equipment",
        ),
        ({"fan_out": {}}, "recipe.actions[0].fan_out: a fan-out action names no equipment"),
        (
            {"equipment": None, "fan_out": {"policy": 0}},
            "recipe.actions[0].fan_out.policy: must be 'all', 'any' or a whole number >= 1",
        ),
    ],
)
def test_a_bad_fan_out_is_named_at_its_path(clamp: dict[str, Any], problem: str) -> None:
    problems = validate_recipe(chart(**clamp))
    assert any(found.startswith(problem) for found in problems), problems


def test_a_fan_out_is_part_of_its_actions_spec() -> None:
    fan_out = {"members": ["nr1", "nr2"], "policy": "any"}
    program = SfcFormat().compile(chart(equipment=None, fan_out=fan_out))
    spec = program.actions["clamp"]
    assert spec.fan_out is not None
    assert (spec.fan_out.members, spec.fan_out.policy) == (("nr1", "nr2"), "any")
    assert [use.equipment for use in spec.equipment_uses()] == ["nr1", "nr2"]


def test_the_drawing_says_what_undoes_an_action() -> None:
    program = SfcFormat().compile(chart(compensation={"name": "unclamp", "type_id": "x.v1"}))
    assert "<title>push_command com.example.clamp.v1 | undo: unclamp</title>" in (
        SfcFormat().render_svg(program)
    )
