"""An SFC action's per-member ``pipeline``: what the runtime is given, and every problem named at
its path (the runtime runs it: tests/e2e/test_workflow.py, in both formats)."""

from __future__ import annotations

from typing import Any

from gateway.formats import ExecutorOptions, TimerKind
from gateway_sfc.format import SfcFormat
from gateway_sfc.validation import validate_recipe

INSERT = "com.example.bench.insert.v1"
BENCH = "com.example.bench.test.v1"


def chart(**per_slot: Any) -> dict[str, Any]:
    action = {
        "name": "per_slot",
        "step": "Test",
        "interaction": "push_command",
        "timeout_seconds": 5,
        "fan_out": {"members": ["slot1", "slot2"]},
        "pipeline": [
            {"name": "insert", "type_id": INSERT},
            {
                "name": "bench",
                "type_id": BENCH,
                "max_attempts": 2,
                "timeout_seconds": 20,
                "backoff_seconds": 3,
            },
        ],
        **per_slot,
    }
    return {
        "steps": [{"name": "Test", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Test", "target": "Done"}],
        "actions": [{key: value for key, value in action.items() if value is not None}],
    }


def test_the_runtime_gets_the_steps_the_first_one_s_type_and_a_wait_for_them_all() -> None:
    program = SfcFormat().compile(chart())
    spec = program.actions["per_slot"]
    assert [(step.name, step.type_id, step.max_attempts) for step in spec.pipeline] == [
        ("insert", INSERT, 1),
        ("bench", BENCH, 2),
    ]
    assert spec.pipeline[0].timeout_seconds == 5  # the action's, as the steps' default
    assert spec.type_id == INSERT  # "declared" members declare the first step's type
    _, effects = program.executor({}, ExecutorOptions()).start("cell1", "J1", 1000.0)
    (timeout,) = [timer for timer in effects.timers if timer.kind is TimerKind.TIMEOUT]
    assert spec.pipeline[1].backoff_seconds == 3
    assert timeout.due == 1000.0 + 5 + 20 * 2 + 3  # each step's waits and backoffs


def test_the_drawings_name_a_pipeline_s_steps_and_its_members() -> None:
    program = SfcFormat().compile(chart())
    drawn = "push_command pipeline insert → bench to each member (all)"
    assert f"<title>{drawn}</title>" in SfcFormat().render_svg(program)
    assert f"per_slot [N] {drawn}" in SfcFormat().render_mermaid(program)


def test_pipeline_problems_are_named_at_their_path() -> None:
    assert validate_recipe(chart(fan_out=None)) == [
        "recipe.actions[0].pipeline: a pipeline runs per member: the action needs a fan_out"
    ]
    assert validate_recipe(chart(type_id=INSERT)) == [
        "recipe.actions[0].pipeline: leave the action's type_id out (each step has its own)"
    ]
    assert validate_recipe(chart(compensation={"type_id": "com.example.undo.v1"})) == [
        "recipe.actions[0].pipeline: a pipeline action cannot have a compensation"
    ]
    bad_steps = [{"name": "per_slot", "type_id": INSERT, "equipment": "x"}, {"name": "a:b"}]
    assert validate_recipe(chart(pipeline=bad_steps)) == [
        "recipe.actions[0].pipeline[0]: unknown field 'equipment' (fields: backoff_seconds, "
        "max_attempts, name, parameters, side_effects, timeout_seconds, type_id)",
        "recipe.actions[0].pipeline[1].name: must be 1-64 letters, digits or _.- characters, "
        "got 'a:b'",
        "recipe.actions[0].pipeline[1].type_id: must be a non-empty string, got None",
    ]
    twice = [{"name": "per_slot", "type_id": INSERT}]
    assert validate_recipe(chart(pipeline=twice)) == [
        "recipe.actions[0].pipeline[0].name: the name 'per_slot' is used twice"
    ]
    assert validate_recipe(chart(pipeline=[])) == [
        "recipe.actions[0].pipeline: must be a non-empty list of steps"
    ]


def test_an_action_without_a_pipeline_still_needs_its_type() -> None:
    recipe = chart(pipeline=None, fan_out=None)
    assert validate_recipe(recipe) == [
        "action 'per_slot' of step 'Test': type_id must not be empty"
    ]
