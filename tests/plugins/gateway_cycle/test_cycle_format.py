"""The example format's recipes: checked against its schema, compiled, drawn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from gateway.formats import ActionSpec, RecipeError
from gateway.testing.jsonschema import schema_errors, unknown_keywords
from gateway_cycle import format as cycle
from gateway_cycle.format import DATASCHEMA, CycleFormat

ROOT = Path(__file__).parents[3]
SCHEMA: dict[str, Any] = json.loads((ROOT / "plugins/gateway_cycle/schema.json").read_text())
EXAMPLE: dict[str, Any] = json.loads((ROOT / "examples/cycles/three_bolts.json").read_text())
FORMAT = CycleFormat()


def problems(recipe: Any) -> list[str]:
    with pytest.raises(RecipeError) as raised:
        FORMAT.compile(recipe)
    return raised.value.problems


def test_the_example_compiles_to_one_action_per_command() -> None:
    program = FORMAT.compile(EXAMPLE)
    assert program.cycles == 3
    assert list(program.actions) == ["position", "tighten"]
    assert program.actions["tighten"] == ActionSpec(
        name="tighten",
        type_id="com.example.station.tighten.v1",
        equipment="tightener",
        parameters={"torque_spec": "85Nm"},
        timeout_seconds=30,
    )
    assert FORMAT.summary(program) == "OK: 2 commands, 3 cycles"


def test_the_schema_names_the_dataschema_accepts_the_example_and_knows_the_fields() -> None:
    assert SCHEMA["$id"] == DATASCHEMA == FORMAT.dataschema
    assert unknown_keywords(SCHEMA) == set()  # the checker below ignores nothing
    assert schema_errors(EXAMPLE, SCHEMA) == []
    assert set(SCHEMA["properties"]) == set(cycle.RECIPE_FIELDS)
    assert set(SCHEMA["$defs"]["Command"]["properties"]) == set(cycle.COMMAND_FIELDS)
    timeout = SCHEMA["$defs"]["Command"]["properties"]["timeout_seconds"]["default"]
    assert timeout == cycle.DEFAULT_TIMEOUT_SECONDS


def command(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": "com.example.do.v1", **fields}


@pytest.mark.parametrize(
    ("recipe", "problem"),
    [
        ([], "recipe: must be a JSON object"),
        ({}, "recipe.commands: required"),
        ({"commands": []}, "recipe.commands: must be a non-empty list of commands, got []"),
        ({"commands": [command("a")], "cycles": 0}, "recipe.cycles: must be a whole number"),
        ({"commands": [command("a")], "cycles": True}, "recipe.cycles: must be a whole number"),
        ({"commands": [command("a")], "cycles": 1001}, "recipe.cycles: must be a whole number"),
        (
            {"commands": [command("a", timeout_seconds=86401)]},
            "recipe.commands[0].timeout_seconds: must be <= 86400, got 86401",
        ),
        ({"commands": [command("a")], "colour": 1}, "recipe: unknown field 'colour'"),
        ({"commands": ["a"]}, "recipe.commands[0]: must be a JSON object"),
        ({"commands": [{"name": "a"}]}, "recipe.commands[0].type_id: required"),
        ({"commands": [command("a:b")]}, "recipe.commands[0].name: must be 1-64 letters"),
        ({"commands": [command("a", timeout_seconds=0)]}, "recipe.commands[0].timeout_seconds"),
        ({"commands": [command("a", parameters=[])]}, "recipe.commands[0].parameters: must be"),
        ({"commands": [command("a", equipment="")]}, "recipe.commands[0].equipment: must be"),
        ({"commands": [command("a"), command("a")]}, "recipe.commands[1].name: 'a' is used twice"),
    ],
)
def test_a_problem_is_named_at_its_element(recipe: Any, problem: str) -> None:
    found = problems(recipe)
    assert any(p.startswith(problem) for p in found), found
    if isinstance(recipe, dict):  # the schema refuses what the compiler refuses
        assert schema_errors(recipe, SCHEMA) or "used twice" in problem


def test_every_problem_is_named_at_once() -> None:
    recipe = {"cycles": 0, "commands": [command("a", timeout_seconds=-1), {"name": "b"}]}
    assert problems(recipe) == [
        "recipe.cycles: must be a whole number from 1 to 1000, got 0",
        "recipe.commands[0].timeout_seconds: must be > 0 (every command waits a bounded time), "
        "got -1",
        "recipe.commands[1].type_id: required",
    ]


def test_binding_routes_the_commands_that_name_no_equipment() -> None:
    program = FORMAT.compile({"commands": [command("a"), command("b", equipment="press")]})
    bound = program.bind({"a": "robot", "b": "other"})
    assert [spec.equipment for spec in bound.actions.values()] == ["robot", "press"]


def test_it_recognizes_its_shape_only() -> None:
    assert FORMAT.recognizes({"commands": []})  # its shape, even when invalid
    assert not FORMAT.recognizes({"steps": []})
    assert not FORMAT.recognizes([])


def test_the_drawings_show_each_command_and_the_loop() -> None:
    program = FORMAT.compile(EXAMPLE)
    svg = ElementTree.fromstring(FORMAT.render_svg(program, {"tighten"}))
    groups = {g.get("data-step"): g.get("class") for g in svg.iter("{http://www.w3.org/2000/svg}g")}
    assert groups == {"position": "step action", "tighten": "step action active"}
    assert FORMAT.render_mermaid(program) == (
        'flowchart TD\n    b0["position"]\n    b1["tighten"]\n    b0 --> b1\n'
        '    b1 -->|"3 cycles"| b0\n'
    )


def test_the_example_to_copy_stays_small() -> None:
    """What a vendor copies to write a format (issue 37: under 250 lines of Python): what the
    cycle format needs beyond that belongs in the runtime or the host, for every format."""
    sources = sorted((ROOT / "plugins/gateway_cycle").glob("*.py"))
    lines = sum(len(path.read_text().splitlines()) for path in sources)
    assert lines < 250, f"plugins/gateway_cycle has {lines} lines of Python"
