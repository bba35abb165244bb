"""Which equipment a recipe's actions reach, checked before a job runs.

A recipe interpreter lists what its recipe asks of equipment as ``EquipmentUse``s (an
``gateway.recipes.EquipmentUser``); ``route`` resolves each against the equipment hub the way
``EquipmentHub.send`` will deliver it:

- an action naming its ``equipment`` goes to that equipment; a ``push_command`` needs a driver
  serving it;
- an action naming none goes to the one equipment of the scope whose configuration declares its
  type (``TypeIds``); a ``push_command`` whose type no equipment declares needs a driver serving
  the type itself (one that routes by type), otherwise it is unroutable;
- a ``pull_event`` naming no equipment whose type no equipment declares is taken from whichever
  equipment sends it (events reach the gateway through every driver; nothing to refuse).

Job management refuses a Work Master or job order with an unroutable action (naming it), and
picks among a job order's Work Masters by ``availability_problems``; the SFC engine binds each
action to its routed equipment when a job starts; the scheduler allocates ``recipe_equipment``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.equipment import EquipmentCommand, EquipmentHub
from gateway.errors import GatewayError


@dataclass(frozen=True)
class EquipmentUse:
    """One action of a recipe that talks to equipment."""

    action: str
    type_id: str
    equipment: str | None  # as the recipe names it; None: routed by ``type_id``
    command: bool  # True: push_command (needs a driver); False: pull_event
    # A fan-out (``gateway.fanout``): every equipment that declares ``type_id``, not the one.
    every: bool = False


@dataclass(frozen=True)
class Route:
    """Where an action goes: ``equipment`` (``None``: whoever serves or sends its type) and the
    ``driver`` delivering its commands; ``problem`` says why it cannot be served."""

    use: EquipmentUse
    equipment: str | None
    driver: str | None = None
    problem: str | None = None


async def route(hub: EquipmentHub, scope: str, use: EquipmentUse) -> Route:
    """Resolve one action against the scope's configuration and the hub's drivers."""
    what = f"action {use.action!r} ({use.type_id})"
    equipment = use.equipment
    if equipment is None:
        declared = list(await hub.declaring(scope, use.type_id))
        if len(declared) > 1:
            named = " and ".join(map(repr, declared))
            return Route(use, None, problem=f"{what}: equipment {named} both declare its type")
        equipment = declared[0] if declared else None
    if not use.command:
        return Route(use, equipment)
    probe = EquipmentCommand(f"route:{use.action}:0", use.type_id, equipment, scope, "", use.action)
    try:
        driver = hub.driver_for(probe)
    except GatewayError:
        names = ", ".join(driver.name for driver in hub.drivers) or "none"
        if equipment is None:
            problem = (
                f"{what}: no equipment of scope {scope!r} declares its type (TypeIds) and no "
                f"driver serves it (drivers: {names})"
            )
        else:
            problem = f"{what}: no driver serves equipment {equipment!r} (drivers: {names})"
        return Route(use, equipment, problem=problem)
    return Route(use, equipment, driver.name)


async def routes(hub: EquipmentHub, scope: str, uses: Iterable[EquipmentUse]) -> list[Route]:
    found = []
    for use in uses:
        if use.every and use.equipment is None:
            found.extend(await _every(hub, scope, use))
        else:
            found.append(await route(hub, scope, use))
    return found


async def _every(hub: EquipmentHub, scope: str, use: EquipmentUse) -> list[Route]:
    """A fan-out over the equipment declaring its type: a route to each (at least one)."""
    declared = sorted(await hub.declaring(scope, use.type_id))
    if not declared:
        what = f"action {use.action!r} ({use.type_id})"
        return [
            Route(
                use,
                None,
                problem=f"{what}: fans out to every equipment of scope {scope!r} "
                "declaring its type (TypeIds), and none does",
            )
        ]
    return [
        await route(hub, scope, EquipmentUse(use.action, use.type_id, member, use.command))
        for member in declared
    ]


def routing_problems(found: Sequence[Route]) -> list[str]:
    return [found_route.problem for found_route in found if found_route.problem is not None]


async def recipe_equipment(
    hub: EquipmentHub, scope: str, uses: Iterable[EquipmentUse]
) -> frozenset[str]:
    """The equipment a recipe talks to, after routing by type (unroutable actions and
    actions served by a type-routing driver name none)."""
    return frozenset(
        found.equipment for found in await routes(hub, scope, uses) if found.equipment is not None
    )


async def availability_problems(
    hub: EquipmentHub, scope: str, uses: Iterable[EquipmentUse]
) -> tuple[list[str], list[str]]:
    """``(unroutable, offline)``: the actions nothing serves, and the equipment known to be
    offline (equipment whose liveness nobody tracks counts as available)."""
    found = await routes(hub, scope, uses)
    offline = []
    for equipment in sorted({r.equipment for r in found if r.equipment is not None}):
        reason = await hub.offline_reason(equipment)
        if reason is not None:
            offline.append(reason)
    return routing_problems(found), offline
