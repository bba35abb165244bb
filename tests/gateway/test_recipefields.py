"""``gateway.recipefields``: every checker, its value or its problem named at the field's path."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest

from gateway.formats import ActionSpec
from gateway.recipefields import COMMAND_DEFAULTS, Fields, read_command

WHERE = "recipe.steps[2]"


class Policy(StrEnum):
    ABORT = "abort"
    HOLD = "hold"


def read(value: dict[str, Any], known: set[str] | None = None) -> tuple[Fields, list[str]]:
    problems: list[str] = []
    return Fields(value, WHERE, problems, known if known is not None else set(value)), problems


def test_unknown_fields_are_named_with_the_known_ones_sorted() -> None:
    fields, problems = read({"name": "a", "colour": 1, "size": 2}, {"type_id", "name"})
    assert problems == [
        "recipe.steps[2]: unknown field 'colour' (fields: name, type_id)",
        "recipe.steps[2]: unknown field 'size' (fields: name, type_id)",
    ]
    assert not fields.ok


def test_what_is_no_json_object_has_no_fields() -> None:
    problems: list[str] = []
    assert Fields.read([1], WHERE, problems, {"a"}, "a JSON object with 'a'") is None
    assert problems == ["recipe.steps[2]: must be a JSON object with 'a'"]
    assert Fields.read({"a": 1}, WHERE, problems, {"a"}) is not None
    assert len(problems) == 1


@pytest.mark.parametrize(
    ("value", "optional", "expected", "problem"),
    [
        ({"t": "x"}, False, "x", None),
        ({}, False, None, "recipe.steps[2].t: must be a non-empty string, got None"),
        ({"t": ""}, False, None, "recipe.steps[2].t: must be a non-empty string, got ''"),
        ({"t": 3}, False, None, "recipe.steps[2].t: must be a non-empty string, got 3"),
        ({}, True, None, None),
        ({"t": ""}, True, None, "recipe.steps[2].t: must be a non-empty string, got ''"),
    ],
)
def test_text(value: dict[str, Any], optional: bool, expected: Any, problem: str | None) -> None:
    fields, problems = read(value, {"t"})
    assert fields.text("t", optional=optional) == expected
    assert problems == ([problem] if problem else [])
    assert fields.ok is (problem is None)


@pytest.mark.parametrize(
    ("value", "expected", "problem"),
    [
        ({"name": "clamp_1.a-b"}, "clamp_1.a-b", None),
        ({}, "dflt", None),  # the default
        ({"name": "a:b"}, None, "must be 1-64 letters, digits or _.- characters, got 'a:b'"),
        ({"name": "a@b"}, None, "must be 1-64 letters, digits or _.- characters, got 'a@b'"),
        ({"name": "x" * 65}, None, "must be 1-64 letters, digits or _.- characters, got 'xxx"),
        ({"name": None}, None, "must be 1-64 letters, digits or _.- characters, got None"),
    ],
)
def test_name(value: dict[str, Any], expected: Any, problem: str | None) -> None:
    fields, problems = read(value, {"name"})
    assert fields.name("name", "dflt") == expected
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1
        assert problems[0].startswith(f"recipe.steps[2].name: {problem}")


@pytest.mark.parametrize(
    ("value", "zero", "expected", "problem"),
    [
        (5, False, 5.0, None),
        (0.5, False, 0.5, None),
        (None, False, 7.0, None),  # absent: the default
        (0, False, None, "must be > 0 (every command waits a bounded time), got 0"),
        (-1, False, None, "must be > 0 (every command waits a bounded time), got -1"),
        ("5", False, None, "must be a number of seconds > 0, got '5'"),
        (True, False, None, "must be a number of seconds > 0, got True"),
        (float("inf"), False, None, "must be a number of seconds > 0, got inf"),
        (0, True, 0.0, None),
        (-1, True, None, "must be >= 0, got -1"),
        ("soon", True, None, "must be a number of seconds >= 0, got 'soon'"),
        (86401, False, None, "must be <= 86400, got 86401"),
    ],
)
def test_seconds(value: Any, zero: bool, expected: Any, problem: str | None) -> None:
    fields, problems = read({} if value is None else {"s": value}, {"s"})
    assert fields.seconds("s", 7, zero=zero, maximum=86400) == expected
    assert problems == ([f"recipe.steps[2].s: {problem}"] if problem else [])


@pytest.mark.parametrize(
    ("value", "maximum", "expected", "problem"),
    [
        (3, None, 3, None),
        (None, None, 1, None),
        (0, None, None, "must be a whole number >= 1, got 0"),
        (True, None, None, "must be a whole number >= 1, got True"),
        (2.0, None, None, "must be a whole number >= 1, got 2.0"),
        (1001, 1000, None, "must be a whole number from 1 to 1000, got 1001"),
        (1000, 1000, 1000, None),
    ],
)
def test_whole_numbers_and_attempts(
    value: Any, maximum: int | None, expected: Any, problem: str | None
) -> None:
    fields, problems = read({} if value is None else {"n": value}, {"n"})
    assert fields.whole("n", 1, maximum=maximum) == expected
    assert problems == ([f"recipe.steps[2].n: {problem}"] if problem else [])
    if maximum is None:
        assert fields.attempts("n") == expected  # the same rule, said the same way


def test_flag() -> None:
    fields, problems = read({"a": False, "b": "yes"})
    assert fields.flag("a", True) is False
    assert fields.flag("c", True) is True
    assert fields.flag("b", True) is None
    assert problems == ["recipe.steps[2].b: must be true or false"]


def test_choice_names_every_value() -> None:
    fields, problems = read({"on_error": "retry"})
    assert fields.choice("on_error", Policy, "abort") is None
    assert fields.choice("other", Policy, "hold") is Policy.HOLD
    assert problems == ["recipe.steps[2].on_error: must be 'abort' or 'hold', got 'retry'"]


def test_mapping_and_items() -> None:
    fields, problems = read({"parameters": [1], "steps": []})
    assert fields.mapping() is None
    assert fields.items("steps", "steps") is None
    assert problems == [
        "recipe.steps[2].parameters: must be a JSON object",
        "recipe.steps[2].steps: must be a non-empty list of steps, got []",
    ]
    fields, problems = read({"steps": [1]}, {"steps", "parameters"})
    assert (fields.mapping(), fields.items("steps", "steps")) == ({}, [1])
    assert problems == []


def test_a_required_field_is_said_to_be_required_and_nothing_else() -> None:
    fields, problems = read({"name": "a"}, {"name", "type_id"})
    fields.require("name", "type_id")
    assert fields.text("type_id") is None
    assert problems == ["recipe.steps[2].type_id: required"]


def test_a_problem_of_the_formats_own_is_named_at_its_field_once() -> None:
    fields, problems = read({"fan_out": {}}, {"fan_out"})
    assert fields.path("fan_out") == "recipe.steps[2].fan_out"
    fields.problem("fan_out", "names no equipment")
    fields.problem("fan_out", "something else")
    assert problems == ["recipe.steps[2].fan_out: names no equipment"]
    assert not fields.ok


def test_a_command_reads_the_fields_its_object_may_have_with_the_formats_defaults() -> None:
    known = {"name", "type_id", "timeout_seconds", "max_attempts"}
    fields, problems = read({"name": "clamp", "type_id": "t.v1"}, known)
    found = read_command(fields, {"timeout_seconds": 5})
    assert found == {"name": "clamp", "type_id": "t.v1", "timeout_seconds": 5.0, "max_attempts": 1}
    assert ActionSpec(**found).timeout_seconds == 5.0
    assert problems == []


def test_a_commands_problems_come_in_field_order_its_values_none() -> None:
    step = {"type_id": "", "equipment": 3, "timeout_seconds": 90, "side_effects": "no"}
    fields, problems = read(step, set(COMMAND_DEFAULTS))
    found = read_command(fields, longest=60)
    assert problems == [
        "recipe.steps[2].name: must be 1-64 letters, digits or _.- characters, got None",
        "recipe.steps[2].type_id: must be a non-empty string, got ''",
        "recipe.steps[2].equipment: must be a non-empty string, got 3",
        "recipe.steps[2].timeout_seconds: must be <= 60, got 90",
        "recipe.steps[2].side_effects: must be true or false",
    ]
    assert found["parameters"] == {}
    assert found["backoff_seconds"] == 0.0
    assert found["name"] is None
    assert not fields.ok
