"""``validate_recipe`` / ``load_chart``, and our JSON Schema against the model and examples."""

from __future__ import annotations

import dataclasses
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

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


# A checker for the keywords our schema uses: no jsonschema dependency for one test.


def schema_errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return schema_errors(value, SCHEMA["$defs"][name], path)
    errors: list[str] = []
    for keyword, check in KEYWORDS.items():
        if keyword in schema:
            errors.extend(check(value, schema, path))
    return errors


def _type(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    kinds = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "null": type(None),
        "integer": int,
        "number": int | float,
    }
    for name in names:
        if isinstance(value, kinds[name]) and not (
            isinstance(value, bool) and name in ("integer", "number")
        ):
            return []
    return [f"{path}: not {names}"]


def _properties(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    if not isinstance(value, dict):
        return []
    errors = [f"{path}: missing {key}" for key in schema.get("required", ()) if key not in value]
    for key, item in value.items():
        if key in schema["properties"]:
            errors += schema_errors(item, schema["properties"][key], f"{path}.{key}")
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}: unexpected {key}")
    return errors


def _additional(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    extra = schema["additionalProperties"]
    if not isinstance(value, dict) or not isinstance(extra, dict) or "properties" in schema:
        return []
    return [e for k, v in value.items() for e in schema_errors(v, extra, f"{path}.{k}")]


def _items(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    if not isinstance(value, list):
        return []
    items = schema["items"]
    return [e for i, v in enumerate(value) for e in schema_errors(v, items, f"{path}[{i}]")]


BOUNDS: dict[str, tuple[Any, Any]] = {
    "minimum": (int | float, lambda v, limit: v >= limit),
    "exclusiveMinimum": (int | float, lambda v, limit: v > limit),
    "minItems": (list, lambda v, limit: len(v) >= limit),
    "minLength": (str, lambda v, limit: len(v) >= limit),
    "maxLength": (str, lambda v, limit: len(v) <= limit),
}


def _bound(keyword: str) -> Any:
    kind, holds = BOUNDS[keyword]

    def check(value: Any, schema: dict[str, Any], path: str) -> list[str]:
        applies = isinstance(value, kind) and not isinstance(value, bool)
        if applies and not holds(value, schema[keyword]):
            return [f"{path}: {keyword} {schema[keyword]}"]
        return []

    return check


def _enum(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    return [] if value in schema["enum"] else [f"{path}: {value!r} not in {schema['enum']}"]


def _const(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    return [] if value == schema["const"] else [f"{path}: not {schema['const']!r}"]


def _any_of(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    if any(not schema_errors(value, option, path) for option in schema["anyOf"]):
        return []
    return [f"{path}: matches no option"]


def _all_of(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    return [e for option in schema["allOf"] for e in schema_errors(value, option, path)]


def _if(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    branch = "then" if not schema_errors(value, schema["if"], path) else "else"
    return schema_errors(value, schema[branch], path) if branch in schema else []


def _not(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    return [f"{path}: must not match"] if not schema_errors(value, schema["not"], path) else []


def _pattern(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    if isinstance(value, str) and not re.search(schema["pattern"], value):
        return [f"{path}: {value!r} does not match {schema['pattern']}"]
    return []


def _property_names(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    keys = value if isinstance(value, dict) else {}
    return [e for key in keys for e in schema_errors(key, schema["propertyNames"], path)]


KEYWORDS = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional,
    "items": _items,
    **{keyword: _bound(keyword) for keyword in BOUNDS},
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "allOf": _all_of,
    "if": _if,
    "not": _not,
    "propertyNames": _property_names,
    "pattern": _pattern,
}
KNOWN = {
    *KEYWORDS,
    *("required", "then", "else"),
    *("$ref", "$defs", "$id", "$schema", "$comment", "title", "description", "default"),
}


def test_the_checker_knows_every_keyword_the_schema_uses() -> None:
    def keywords(schema: Any) -> set[str]:
        if not isinstance(schema, dict):
            return set()
        found = set(schema)
        for key, item in schema.items():
            children = item.values() if key in ("properties", "$defs") else [item]
            if isinstance(item, list):
                children = item
            for child in children:
                found |= keywords(child)
        return found

    assert keywords(SCHEMA) <= KNOWN


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
