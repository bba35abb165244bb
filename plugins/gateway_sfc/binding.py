"""Each action bound to the equipment its type routes to, once, when a job starts.

A recipe may leave ``equipment`` out and route by ``type_id`` (``gateway.routing``). The engine
fixes the routing when the job starts and keeps the bound recipe in the job's snapshot, so
everything after works with named equipment: offline reasons and liveness timers, commands sent
again when equipment comes back, events taken only from the equipment they are expected from.
A configuration change while the job runs does not move its actions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.equipment import EquipmentHub
from gateway.routing import routes, routing_problems
from gateway_sfc.chart import Chart
from gateway_sfc.model import Qualifier, unstructure_recipe
from gateway_sfc.validation import recipe_equipment_uses


async def bind_equipment(hub: EquipmentHub, scope: str, chart: Chart) -> tuple[Any, list[str]]:
    """``(recipe, problems)``: the recipe JSON with routed equipment filled in (``None``: no
    action needed it), or why an action cannot be served."""
    recipe = chart.recipe
    found = await routes(hub, scope, recipe_equipment_uses(recipe))
    problems = routing_problems(found)
    if problems:
        return None, problems
    bound = {
        item.use.action: item.equipment
        for item in found
        if item.use.equipment is None and item.equipment is not None
    }
    if not bound:
        return None, []
    actions = [
        replace(action, equipment=bound[action.name])
        if action.name in bound and action.equipment is None and action.qualifier is not Qualifier.R
        else action
        for action in recipe.actions
    ]
    return unstructure_recipe(replace(recipe, actions=actions)), []
