"""Each action bound to the equipment its type routes to, once, when a job starts.

A recipe may leave ``equipment`` out and route by ``type_id`` (``gateway.routing``). The runtime
fixes the routing when the job starts and keeps it in the job's snapshot, so everything after
works with named equipment: offline reasons and liveness timers, commands sent again when
equipment comes back, events taken only from the equipment they are expected from. A
configuration change while the job runs does not move its actions.
"""

from __future__ import annotations

from gateway.equipment import EquipmentHub
from gateway.formats import Program
from gateway.routing import routes, routing_problems


async def bind_equipment(
    hub: EquipmentHub, scope: str, program: Program
) -> tuple[dict[str, str], list[str]]:
    """``(bound, problems)``: the equipment each action naming none is routed to, or why an
    action cannot be served."""
    uses = [action.equipment_use() for action in program.actions.values()]
    found = await routes(hub, scope, uses)
    problems = routing_problems(found)
    if problems:
        return {}, problems
    bound = {
        item.use.action: item.equipment
        for item in found
        if item.use.equipment is None and item.equipment is not None
    }
    return bound, []
