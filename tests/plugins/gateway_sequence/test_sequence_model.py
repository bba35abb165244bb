"""Loading and validating sequence recipes: every problem named, at its element."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.compensation import COMPENSATION_FIELDS
from gateway.formats import RecipeError
from gateway.testing.jsonschema import schema_errors, unknown_keywords
from gateway_sequence import model
from gateway_sequence.model import DATASCHEMA, PIPELINE_FIELDS, OnError, load_sequence

SCHEMA: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "plugins" / "gateway_sequence" / "schema.json").read_text()
)
EXAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "sequences" / "axle.json").read_text()
)


def validate_sequence(recipe: Any) -> list[str]:
    try:
        load_sequence(recipe)
    except RecipeError as error:
        return error.problems
    return []


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": "com.example.do.v1", **fields}


def test_the_example_loads_with_its_par_block_and_defaults() -> None:
    recipe = load_sequence(EXAMPLE)
    assert [block.name for block in recipe.blocks] == ["position", "fit_and_inspect", "home"]
    fit = recipe.blocks[1]
    assert fit.parallel
    assert [command.name for command in fit.commands] == ["tighten", "inspect"]
    inspect = recipe.command("inspect")
    assert inspect.timeout_seconds == EXAMPLE["timeout_seconds"]  # the recipe's default
    assert inspect.max_attempts == 1
    assert inspect.on_error is OnError.ABORT
    assert recipe.command("tighten").on_error is OnError.HOLD
    assert recipe.command("tighten").parameters == {"torque_spec": "85Nm"}


def test_the_schema_names_the_dataschema_and_accepts_the_example() -> None:
    assert SCHEMA["$id"] == DATASCHEMA
    assert unknown_keywords(SCHEMA) == set()  # the checker below ignores nothing
    assert schema_errors(EXAMPLE, SCHEMA) == []


def test_the_schema_and_the_loader_know_the_same_fields() -> None:
    definitions = SCHEMA["$defs"]
    assert set(definitions["Recipe"]["properties"]) == model.RECIPE_FIELDS
    assert set(definitions["Command"]["properties"]) == model.COMMAND_FIELDS
    assert set(definitions["Par"]["properties"]) == model.PAR_FIELDS
    assert set(definitions["Compensation"]["properties"]) == COMPENSATION_FIELDS
    assert set(definitions["Pipeline"]["properties"]) == PIPELINE_FIELDS
    assert definitions["OnError"]["enum"] == [member.value for member in OnError]
    assert definitions["Recipe"]["properties"]["timeout_seconds"]["default"] == (
        model.DEFAULT_TIMEOUT_SECONDS
    )


@pytest.mark.parametrize(
    ("recipe", "problem"),
    [
        ([], "recipe: must be a JSON object with 'steps'"),
        ({"steps": []}, "recipe.steps: must be a non-empty list of steps"),
        ({"steps": [step("a")], "colour": "red"}, "recipe: unknown field 'colour'"),
        ({"steps": [{"name": "a"}]}, "recipe.steps[0].type_id: must be a non-empty string"),
        ({"steps": [step("a:b")]}, "recipe.steps[0].name: must be 1-64 letters"),
        (
            {"steps": [step("a", timeout_seconds=0)]},
            "recipe.steps[0].timeout_seconds: must be > 0",
        ),
        (
            {"steps": [step("a", timeout_seconds="5")]},
            "recipe.steps[0].timeout_seconds: must be a number of seconds > 0, got '5'",
        ),
        (
            {"steps": [step("a", max_attempts=0)]},
            "recipe.steps[0].max_attempts: must be a whole number >= 1, got 0",
        ),
        (
            {"steps": [step("a", on_error="retry")]},
            "recipe.steps[0].on_error: must be 'abort' or 'hold', got 'retry'",
        ),
        ({"steps": [step("a", parameters=[1])]}, "recipe.steps[0].parameters: must be a JSON"),
        (
            {"steps": [{"par": [step("a")]}]},
            "recipe.steps[0].par: must list at least two command steps",
        ),
        (
            {"steps": [{"par": [step("a"), {"par": [step("b"), step("c")]}]}]},
            "recipe.steps[0].par[1]: a par block cannot hold another par block",
        ),
        (
            {"steps": [step("a"), {"par": [step("a"), step("b")]}]},
            "recipe.steps: the name 'a' is used twice",
        ),
        ({"steps": [step("a")], "timeout_seconds": -1}, "recipe.timeout_seconds: must be > 0"),
        ({"steps": ["a"]}, "recipe.steps[0]: must be a JSON object"),
        (
            {"steps": [step("a", compensation={"name": "undo"})]},
            "recipe.steps[0].compensation.type_id: must be a non-empty string",
        ),
        (
            {"steps": [step("a", compensation={"type_id": "t", "timeout_seconds": 0})]},
            "recipe.steps[0].compensation.timeout_seconds: must be > 0 (every command waits",
        ),
        (
            {"steps": [step("a", compensation={"type_id": "t", "colour": 1})]},
            "recipe.steps[0].compensation: unknown field 'colour'",
        ),
        (
            {"steps": [step("a", side_effects=False, compensation={"type_id": "t"})]},
            "recipe.steps[0].compensation: the step has side_effects false",
        ),
        (
            {"steps": [step("a"), step("b", compensation={"name": "a", "type_id": "t"})]},
            "recipe.steps: the name 'a' is used twice",
        ),
    ],
)
def test_a_problem_is_named_at_its_element(recipe: Any, problem: str) -> None:
    problems = validate_sequence(recipe)
    assert any(p.startswith(problem) for p in problems), problems
    if isinstance(recipe, dict):  # the schema refuses what the loader refuses
        # (the schema cannot see a step that changes nothing having something to undo)
        assert schema_errors(recipe, SCHEMA) or "used twice" in problem or "side_effects" in problem


def test_every_problem_is_named_at_once() -> None:
    recipe = {"steps": [step("a", timeout_seconds=0), {"name": "b"}, step("a")]}
    assert validate_sequence(recipe) == [
        "recipe.steps[0].timeout_seconds: must be > 0 (every command waits a bounded time), got 0",
        "recipe.steps[1].type_id: must be a non-empty string, got None",
    ]  # 'a' twice is not reported: the first 'a' did not load


def test_the_recipes_defaults_apply_to_steps_that_do_not_set_their_own() -> None:
    recipe = load_sequence(
        {
            "on_error": "hold",
            "timeout_seconds": 2,
            "max_attempts": 3,
            "steps": [step("a"), step("b", on_error="abort", timeout_seconds=7, max_attempts=1)],
        }
    )
    a, b = recipe.command("a"), recipe.command("b")
    assert (a.on_error, a.timeout_seconds, a.max_attempts) == (OnError.HOLD, 2.0, 3)
    assert (b.on_error, b.timeout_seconds, b.max_attempts) == (OnError.ABORT, 7.0, 1)
