"""The recipe each job runs, fixed when it started, compiled once and kept in memory."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gateway_sfc.chart import Chart
from gateway_sfc.context import EngineContext
from gateway_sfc.engine import Executor
from gateway_sfc.model import Action
from gateway_sfc.validation import load_chart


@dataclass(frozen=True)
class Snapshot:
    """What a job runs: its compiled chart and parameters (fixed when it started)."""

    chart: Chart
    parameters: Mapping[str, Any]
    recipe: Any

    @cached_property
    def _actions(self) -> dict[str, Action]:
        return {action.name: action for action in self.chart.recipe.actions}

    def action(self, name: str) -> Action:
        """The recipe's action of that name (``KeyError``: none)."""
        return self._actions[name]


class RecipeCache:
    """Reads ``sfc:recipe:<job>`` snapshots, keeping the most recently used compiled charts."""

    def __init__(self, context: EngineContext) -> None:
        self.context = context
        self._snapshots: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()
        # Jobs of one Work Master run the same recipe: compile it once (key: its JSON text).
        self._charts: OrderedDict[str, Chart] = OrderedDict()

    def chart(self, recipe: Any) -> Chart:
        """The compiled chart of ``recipe`` (``ValidationError``: it cannot run)."""
        key = json.dumps(recipe, sort_keys=True, default=str)
        chart = self._charts.get(key)
        if chart is None:
            chart = self._charts[key] = load_chart(recipe)
            if len(self._charts) > self.context.settings.chart_cache_size:
                self._charts.popitem(last=False)
        else:
            self._charts.move_to_end(key)
        return chart

    async def save(
        self, scope: str, job: str, chart: Chart, recipe: Any, parameters: Mapping[str, Any]
    ) -> None:
        """Keep the recipe a job starts with (the first save wins: a restart keeps it)."""
        snapshot = {"recipe": recipe, "parameters": parameters}
        key = self.context.keys.recipe(scope, job)
        if await self.context.client.set(key, json.dumps(snapshot), nx=True):
            self._keep((scope, job), Snapshot(chart, parameters, recipe))

    async def get(self, scope: str, job: str) -> Snapshot:
        key = (scope, job)
        if key in self._snapshots:
            self._snapshots.move_to_end(key)
            return self._snapshots[key]
        text = await self.context.client.get(self.context.keys.recipe(scope, job))
        if text is None:
            raise ValueError(f"job {scope}/{job} has an execution state but no recipe snapshot")
        data = json.loads(text)
        snapshot = Snapshot(self.chart(data["recipe"]), data["parameters"], data["recipe"])
        self._keep(key, snapshot)
        return snapshot

    def _keep(self, key: tuple[str, str], snapshot: Snapshot) -> None:
        self._snapshots[key] = snapshot
        if len(self._snapshots) > self.context.settings.chart_cache_size:
            self._snapshots.popitem(last=False)

    def holds(self, scope: str, job: str) -> bool:
        """Whether the job's snapshot is in memory (so the job is one of this engine's)."""
        return (scope, job) in self._snapshots

    def forget(self, scope: str, job: str) -> None:
        """The job ended: its snapshot is not needed any more."""
        self._snapshots.pop((scope, job), None)

    async def executor(self, scope: str, job: str) -> Executor:
        """An executor for the job's chart and parameters."""
        snapshot = await self.get(scope, job)
        return self.context.executor(snapshot.chart, snapshot.parameters)
