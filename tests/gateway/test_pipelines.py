"""``gateway.pipelines``: a fan-out's per-member pipeline read as every format reads it."""

from __future__ import annotations

from gateway.formats import ActionSpec
from gateway.pipelines import load_pipeline

WHERE = "recipe.actions[0].pipeline"


def test_each_step_is_a_command_to_its_member_with_the_formats_defaults() -> None:
    problems: list[str] = []
    steps = load_pipeline(
        [
            {"name": "insert", "type_id": "i.v1"},
            {"name": "test", "type_id": "t.v1", "max_attempts": 2, "backoff_seconds": 1},
        ],
        WHERE,
        problems,
        {"timeout_seconds": 30},
    )
    assert problems == []
    assert steps == (
        ActionSpec("insert", "i.v1", timeout_seconds=30.0),
        ActionSpec("test", "t.v1", timeout_seconds=30.0, max_attempts=2, backoff_seconds=1.0),
    )
    assert steps[1].longest_wait() == 61.0  # two tries of 30 s, 1 s apart


def test_problems_are_named_at_the_step_and_a_blocks_own_field_is_said_to_be_so() -> None:
    problems: list[str] = []
    value = [
        {"name": "a", "type_id": "t", "equipment": "x", "colour": 1},
        "b",
        {"name": "c:d", "type_id": "t", "timeout_seconds": 0},
    ]
    assert load_pipeline(value, WHERE, problems, blocks=("equipment",)) == ()
    assert problems == [
        "recipe.actions[0].pipeline[0]: unknown field 'colour' (fields: backoff_seconds, "
        "equipment, max_attempts, name, parameters, side_effects, timeout_seconds, type_id)",
        "recipe.actions[0].pipeline[0].equipment: not for a pipeline's step (the block's own)",
        "recipe.actions[0].pipeline[1]: must be a JSON object with 'name' and 'type_id'",
        "recipe.actions[0].pipeline[2].name: must be 1-64 letters, digits or _.- characters, "
        "got 'c:d'",
        "recipe.actions[0].pipeline[2].timeout_seconds: must be > 0 (every command waits a "
        "bounded time), got 0",
    ]


def test_a_pipeline_is_a_non_empty_list() -> None:
    values: list[object] = [[], None, {"name": "a"}]
    for value in values:
        problems: list[str] = []
        assert load_pipeline(value, WHERE, problems) == ()
        assert problems == ["recipe.actions[0].pipeline: must be a non-empty list of steps"]
