"""The sequence format as the runtime sees it: its actions, binding, shape and summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.formats import ActionSpec, Interaction
from gateway_sequence.format import SequenceFormat
from gateway_sfc.format import SfcFormat

EXAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "sequences" / "axle.json").read_text()
)
FORMAT = SequenceFormat()


def test_every_command_step_is_an_action_in_recipe_order() -> None:
    actions = FORMAT.compile(EXAMPLE).actions
    assert list(actions) == ["position", "tighten", "inspect", "home"]
    assert actions["inspect"] == ActionSpec(
        name="inspect",
        type_id="com.example.station.inspect.v1",
        interaction=Interaction.PUSH_COMMAND,
        equipment="camera",
        parameters={},
        timeout_seconds=30.0,
        max_attempts=1,
        side_effects=False,
    )


def test_the_summary_counts_blocks_and_steps() -> None:
    assert FORMAT.summary(FORMAT.compile(EXAMPLE)) == "OK: 3 blocks (1 par), 4 steps"


@pytest.mark.parametrize(
    ("recipe", "sequence"),
    [
        ({"steps": []}, True),  # its shape, even when invalid
        ({"steps": [{"name": "S", "initial": True}], "transitions": []}, False),  # an SFC chart
        ({"commands": []}, False),
        ([], False),
    ],
)
def test_it_recognizes_the_shape_of_a_sequence_and_not_of_a_chart(
    recipe: Any, sequence: bool
) -> None:
    assert FORMAT.recognizes(recipe) is sequence
    if not sequence and isinstance(recipe, dict) and "transitions" in recipe:
        assert SfcFormat().recognizes(recipe)


def test_binding_routes_only_the_steps_that_name_no_equipment() -> None:
    recipe = {
        "steps": [
            {"name": "a", "type_id": "com.example.a.v1"},
            {"name": "b", "type_id": "com.example.b.v1", "equipment": "press"},
        ]
    }
    bound = FORMAT.compile(recipe).bind({"a": "robot", "b": "other"})
    assert {name: spec.equipment for name, spec in bound.actions.items()} == {
        "a": "robot",
        "b": "press",
    }
