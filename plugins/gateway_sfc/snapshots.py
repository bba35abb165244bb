"""The recipe each job runs, fixed when it started, compiled once and kept in memory."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway_sfc.chart import Chart
from gateway_sfc.context import EngineContext
from gateway_sfc.engine import Executor
from gateway_sfc.validation import load_chart


@dataclass(frozen=True)
class Snapshot:
    """What a job runs: its compiled chart and parameters (fixed when it started)."""

    chart: Chart
    parameters: Mapping[str, Any]
    recipe: Any


class RecipeCache:
    """Reads ``sfc:recipe:<job>`` snapshots, keeping the most recently used compiled charts."""

    def __init__(self, context: EngineContext) -> None:
        self.context = context
        self._snapshots: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()

    async def save(self, scope: str, job: str, recipe: Any, parameters: Mapping[str, Any]) -> None:
        """Keep the recipe a job starts with (the first save wins: a restart keeps it)."""
        snapshot = {"recipe": recipe, "parameters": parameters}
        key = self.context.keys.recipe(scope, job)
        await self.context.client.set(key, json.dumps(snapshot), nx=True)

    async def get(self, scope: str, job: str) -> Snapshot:
        key = (scope, job)
        if key in self._snapshots:
            self._snapshots.move_to_end(key)
            return self._snapshots[key]
        text = await self.context.client.get(self.context.keys.recipe(scope, job))
        if text is None:
            raise ValueError(f"job {scope}/{job} has an execution state but no recipe snapshot")
        data = json.loads(text)
        snapshot = Snapshot(load_chart(data["recipe"]), data["parameters"], data["recipe"])
        self._snapshots[key] = snapshot
        if len(self._snapshots) > self.context.settings.chart_cache_size:
            self._snapshots.popitem(last=False)
        return snapshot

    async def executor(self, scope: str, job: str) -> Executor:
        """An executor for the job's chart and parameters."""
        snapshot = await self.get(scope, job)
        return self.context.executor(snapshot.chart, snapshot.parameters)
