"""Routing by type: where each action of a recipe goes, and commands without equipment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from gateway.equipment import EquipmentCommand, EquipmentHub
from gateway.routing import (
    EquipmentUse,
    availability_problems,
    recipe_equipment,
    route,
)

pytestmark = pytest.mark.anyio

PRESS = "com.example.press.v1"


@dataclass
class Directory:
    """``EquipmentDirectory`` from a dict: scope -> equipment -> types."""

    declared: dict[str, dict[str, list[str]]]

    async def declaring(self, scope: str, type_id: str) -> Sequence[str]:
        types = self.declared.get(scope, {})
        return sorted(name for name, served in types.items() if type_id in served)


@dataclass
class Named:
    """A driver for named equipment only (as the MQTT driver with ``*``)."""

    name: str = "named"
    sent: list[EquipmentCommand] = field(default_factory=list)

    def serves(self, command: EquipmentCommand) -> bool:
        return command.equipment is not None

    async def send(self, command: EquipmentCommand) -> None:
        self.sent.append(command)


@dataclass
class ByType:
    """A driver that routes by type itself."""

    types: frozenset[str]
    name: str = "by-type"

    def serves(self, command: EquipmentCommand) -> bool:
        return command.type in self.types

    async def send(self, command: EquipmentCommand) -> None:
        pass


def hub(declared: dict[str, list[str]], *drivers: object) -> EquipmentHub:
    equipment = EquipmentHub()
    equipment.set_directory(Directory({"cell1": declared}))
    for driver in drivers:
        equipment.add_driver(driver)  # type: ignore[arg-type]
    return equipment


def use(type_id: str = PRESS, equipment: str | None = None, command: bool = True) -> EquipmentUse:
    return EquipmentUse("act", type_id, equipment, command)


async def test_an_action_without_equipment_goes_to_the_equipment_declaring_its_type() -> None:
    equipment = hub({"press-1": [PRESS]}, Named())
    found = await route(equipment, "cell1", use())
    other_scope = await route(equipment, "cell2", use())
    assert (found.equipment, found.driver, found.problem) == ("press-1", "named", None)
    assert other_scope.problem == (
        "action 'act' (com.example.press.v1): no equipment of scope 'cell2' declares its type "
        "(TypeIds) and no driver serves it (drivers: named)"
    )


async def test_a_driver_routing_by_type_serves_what_no_equipment_declares() -> None:
    equipment = hub({}, ByType(frozenset({PRESS})))
    found = await route(equipment, "cell1", use())
    assert (found.equipment, found.driver, found.problem) == (None, "by-type", None)


async def test_named_equipment_needs_a_driver_and_ambiguity_is_a_problem() -> None:
    equipment = hub({"a": [PRESS], "b": [PRESS]}, ByType(frozenset()))
    unserved = await route(equipment, "cell1", use(equipment="gauge"))
    ambiguous = await route(equipment, "cell1", use())
    assert unserved.problem == (
        "action 'act' (com.example.press.v1): no driver serves equipment 'gauge' (drivers: by-type)"
    )
    assert ambiguous.problem == (
        "action 'act' (com.example.press.v1): equipment 'a' and 'b' both declare its type"
    )


async def test_pull_events_route_by_declared_type_and_are_never_unroutable() -> None:
    equipment = hub({"cam": ["qa.v1"]}, Named())
    declared = await route(equipment, "cell1", use("qa.v1", command=False))
    anyone = await route(equipment, "cell1", use("other.v1", command=False))
    assert (declared.equipment, declared.problem) == ("cam", None)
    assert (anyone.equipment, anyone.problem) == (None, None)


async def test_recipe_equipment_and_availability_after_routing() -> None:
    equipment = hub({"press-1": [PRESS]}, Named())
    uses = [use(), use("qa.v1", "cam", command=False), use("x.v1")]
    assert await recipe_equipment(equipment, "cell1", uses) == {"press-1", "cam"}
    await equipment.heartbeat("press-1")
    await equipment.gone("press-1", "disconnected")
    unroutable, offline = await availability_problems(equipment, "cell1", uses)
    assert [problem.split(":")[0] for problem in unroutable] == ["action 'act' (x.v1)"]
    assert len(offline) == 1
    assert offline[0].startswith("equipment press-1 offline: disconnected")


async def test_send_routes_a_command_without_equipment_by_its_type() -> None:
    driver = Named()
    equipment = hub({"press-1": [PRESS]}, driver)
    await equipment.send(EquipmentCommand("J1:act:1", PRESS, None, "cell1", "J1", "act"))
    assert [command.equipment for command in driver.sent] == ["press-1"]
