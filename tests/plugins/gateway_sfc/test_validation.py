"""``validate_recipe`` / ``load_chart``, and our JSON Schema against the model and examples."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.jsonschema import schema_errors, unknown_keywords
from gateway_sfc import model
from gateway_sfc.chart import RecipeError
from gateway_sfc.validation import load_chart, validate_recipe

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples" / "recipes").glob("*.json"))
SCHEMA_FILE = ROOT / "schemas" / "sfc_recipe.schema.json"


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_examples_are_valid(path: Path) -> None:
    assert validate_recipe(load_json(path)) == []
    assert load_chart(load_json(path)).recipe.steps


def test_there_are_examples() -> None:
    assert {path.stem for path in EXAMPLES} >= {"rear_axle", "loop_until_count", "nested_branches"}


def test_shape_errors_name_the_element_one_problem_each() -> None:
    data = load_json(ROOT / "examples" / "recipes" / "rear_axle.json")
    data["steps"][1]["initial"] = "yes"
    problems = validate_recipe(data)
    assert len(problems) == 1
    assert problems[0].startswith("recipe.steps[1].initial: ")
    assert validate_recipe([]) == ["recipe: must be a JSON object"]
    assert validate_recipe({"steps": [{"name": "A", "colour": "red"}]})[0].startswith(
        "recipe.steps[0]"
    )
    assert validate_recipe({"steps": [{"name": 1}, {"name": 2, "initial": 0}]}) == [
        "recipe.steps[0].name: invalid value for type, expected str",
        "recipe.steps[1].name: invalid value for type, expected str",
        "recipe.steps[1].initial: invalid value for type, expected bool",
    ]


def test_load_chart_raises_with_every_problem() -> None:
    data = {"steps": [{"name": "A"}], "transitions": [{"source": "A", "target": "B"}]}
    with pytest.raises(RecipeError) as caught:
        load_chart(data)
    assert caught.value.problems == validate_recipe(data)
    assert caught.value.problems == [
        'recipe: no initial step (mark exactly one step "initial": true)',
        "transition A -> B: target 'B' is neither a step nor a branch",
    ]


# -- the JSON Schema ---------------------------------------------------------------------------

SCHEMA: dict[str, Any] = load_json(SCHEMA_FILE)
DEFINITIONS = {
    "Recipe": model.Recipe,
    "Step": model.Step,
    "Transition": model.Transition,
    "Action": model.Action,
    "Branch": model.Branch,
    "RetryPolicy": model.RetryPolicy,
}
ENUMS: dict[str, type[StrEnum]] = {
    "Qualifier": model.Qualifier,
    "Interaction": model.Interaction,
    "BranchType": model.BranchType,
    "OnError": model.OnError,
}


def test_schema_identity() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["$id"] == model.DATASCHEMA
    assert SCHEMA["$ref"] == "#/$defs/Recipe"


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_schema_properties_are_the_model_fields(name: str) -> None:
    definition = SCHEMA["$defs"][name]
    fields = {field.name: field for field in dataclasses.fields(DEFINITIONS[name])}
    assert list(definition["properties"]) == list(fields)
    assert definition["additionalProperties"] is False
    required = {
        name
        for name, field in fields.items()
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    }
    assert set(definition.get("required", ())) == required
    for field_name, schema in definition["properties"].items():
        assert schema.get("description") or "$ref" in schema, f"{name}.{field_name}"
        default = fields[field_name].default
        if isinstance(default, str | int | float | bool):
            assert schema["default"] == default, f"{name}.{field_name}"


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_schema_enums_are_the_model_enums(name: str) -> None:
    assert SCHEMA["$defs"][name]["enum"] == [member.value for member in ENUMS[name]]


def test_the_checker_knows_every_keyword_the_schema_uses() -> None:
    assert unknown_keywords(SCHEMA) == set()


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_examples_follow_the_schema(path: Path) -> None:
    assert schema_errors(load_json(path), SCHEMA) == []


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda r: r["steps"][0].update(colour="red"), "$.steps[0]: unexpected colour"),
        (lambda r: r["actions"][0].update(qualifier="X"), "$.actions[0].qualifier: 'X' not in"),
        (lambda r: r["actions"][0].update(qualifier="L"), "$.actions[0]: missing time_seconds"),
        (lambda r: r["actions"][0].update(timeout_seconds=0), "exclusiveMinimum 0"),
        (lambda r: r["branches"][0].update(branches=[["A"]]), "$.branches[0].branches: minItems"),
        (lambda r: r.update(conditions={"a-b": "true"}), "$.conditions: 'a-b' does not match"),
    ],
)
def test_the_schema_rejects(change: Any, error: str) -> None:
    data = load_json(ROOT / "examples" / "recipes" / "rear_axle.json")
    change(data)
    assert any(error in found for found in schema_errors(data, SCHEMA))
