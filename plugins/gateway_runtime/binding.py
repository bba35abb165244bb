"""Each action bound to the equipment its type routes to, once, when a job starts.

A recipe may leave ``equipment`` out and route by ``type_id`` (``gateway.routing``). The runtime
fixes the routing when the job starts and keeps it in the job's snapshot, so everything after
works with named equipment: offline reasons and liveness timers, commands sent again when
equipment comes back, events taken only from the equipment they are expected from. A
configuration change while the job runs does not move its actions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.equipment import EquipmentHub
from gateway.fanout import member_id_problem
from gateway.formats import ActionSpec, Program
from gateway.routing import routes, routing_problems


async def bind_equipment(
    hub: EquipmentHub, scope: str, program: Program
) -> tuple[dict[str, str], list[str]]:
    """``(bound, problems)``: the equipment each action naming none is routed to, or why an
    action cannot be served."""
    uses = [use for action in program.actions.values() for use in action.equipment_uses()]
    found = await routes(hub, scope, uses)
    problems = routing_problems(found)
    if problems:
        return {}, problems
    fanned = {name for name, spec in program.actions.items() if spec.fan_out is not None}
    bound = {
        item.use.action: item.equipment
        for item in found
        if item.use.equipment is None
        and item.equipment is not None
        and item.use.action not in fanned
    }
    return bound, []


async def fan_out_members(
    hub: EquipmentHub, scope: str, program: Program, parameters: Mapping[str, Any]
) -> tuple[dict[str, list[str]], list[str]]:
    """``(members, problems)``: who each fan-out action of ``program`` goes to, fixed now."""
    members: dict[str, list[str]] = {}
    problems: list[str] = []
    for name, spec in program.actions.items():
        if spec.fan_out is None:
            continue
        found = await _members(hub, scope, spec, parameters)
        if isinstance(found, str):
            problems.append(f"action {name!r}: {found}")
            continue
        needed = spec.fan_out.needed(len(found))
        if not found or needed > len(found):
            problems.append(
                f"action {name!r}: fans out to {len(found)} equipment, and its policy needs "
                f"{needed}"
            )
            continue
        members[name] = found
    return members, problems


async def _members(
    hub: EquipmentHub, scope: str, spec: ActionSpec, parameters: Mapping[str, Any]
) -> list[str] | str:
    """The members of ``spec``'s fan-out, or why there are none."""
    assert spec.fan_out is not None
    if spec.fan_out.members is not None:
        return list(spec.fan_out.members)
    if spec.fan_out.parameter is None:
        return sorted(await hub.declaring(scope, spec.type_id))
    value = parameters.get(spec.fan_out.parameter)
    if not isinstance(value, list) or not value:
        return f"job parameter {spec.fan_out.parameter!r} must list equipment IDs, got {value!r}"
    for member in value:
        problem = member_id_problem(member)
        if problem is not None:
            return f"job parameter {spec.fan_out.parameter!r}: {problem}"
    return [str(member) for member in dict.fromkeys(value)]
