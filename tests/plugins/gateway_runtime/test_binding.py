"""Binding a recipe's actions to the equipment their types route to, when a job starts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.equipment import EquipmentCommand, EquipmentHub
from gateway_runtime.binding import bind_equipment
from gateway_sfc.format import SfcFormat
from gateway_sfc.validation import equipment_uses

FORMAT = SfcFormat()

pytestmark = pytest.mark.anyio

RECIPE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle_microdcs.json").read_text()
)
DECLARED = {
    "positioner": ["com.example.station.position.v1"],
    "tightener": ["com.example.station.tighten.v1", "com.example.station.torque_result.v1"],
}


class Directory:
    async def declaring(self, scope: str, type_id: str) -> Sequence[str]:
        return [name for name, types in DECLARED.items() if type_id in types]


class Named:
    name = "named"

    def serves(self, command: EquipmentCommand) -> bool:
        return command.equipment is not None

    async def send(self, command: EquipmentCommand) -> None:
        pass


def station_hub() -> EquipmentHub:
    hub = EquipmentHub()
    hub.add_driver(Named())
    hub.set_directory(Directory())
    return hub


def test_the_interpreter_lists_what_a_recipe_asks_of_equipment() -> None:
    uses = {use.action: (use.type_id, use.equipment, use.command) for use in equipment_uses(RECIPE)}
    assert uses["tighten"] == ("com.example.station.tighten.v1", None, True)
    assert uses["camera_qa"] == ("com.example.station.qa_result.v1", None, False)
    assert equipment_uses({"steps": "not a list"}) == []  # validation says why


async def test_actions_are_bound_to_the_declaring_equipment_and_others_left_open() -> None:
    program = FORMAT.compile(RECIPE)
    equipment, problems = await bind_equipment(station_hub(), "cell1", program)
    assert problems == []
    bound = {name: action.equipment for name, action in program.bind(equipment).actions.items()}
    # The camera declares nothing here: its QA result is taken from whoever sends it.
    assert bound == {
        "position_axle": "positioner",
        "tighten": "tightener",
        "camera_qa": None,
        "verify": "tightener",
    }


async def test_an_unroutable_action_is_named_and_nothing_is_bound() -> None:
    hub = EquipmentHub()
    hub.add_driver(Named())  # and no directory: nothing declares any type
    equipment, problems = await bind_equipment(hub, "cell1", FORMAT.compile(RECIPE))
    assert equipment == {}
    assert [problem.split(":")[0] for problem in problems] == [
        "action 'position_axle' (com.example.station.position.v1)",
        "action 'tighten' (com.example.station.tighten.v1)",
    ]


async def test_a_recipe_naming_its_equipment_is_kept_as_it_is() -> None:
    named = {
        **RECIPE,
        "actions": [{**action, "equipment": "cell-device"} for action in RECIPE["actions"]],
    }
    assert await bind_equipment(station_hub(), "cell1", FORMAT.compile(named)) == ({}, [])
