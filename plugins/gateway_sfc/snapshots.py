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
    run: str = ""  # the job's run it belongs to (``Execution.run``)

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

    def document(self, snapshot: Snapshot) -> str:
        """The snapshot as stored (``sfc:recipe:<job>``), written with the job's first state."""
        return json.dumps(
            {"recipe": snapshot.recipe, "parameters": snapshot.parameters, "run": snapshot.run}
        )

    def keep(self, scope: str, job: str, snapshot: Snapshot) -> None:
        """The snapshot of a job this instance just started."""
        self._keep((scope, job), snapshot)

    async def get(self, scope: str, job: str, run: str | None = None) -> Snapshot:
        """The job's snapshot; with ``run``, the one kept in memory only if it is that run's
        (another instance may have started the job again under the same id meanwhile)."""
        key = (scope, job)
        kept = self._snapshots.get(key)
        if kept is not None and (run is None or kept.run == run):
            self._snapshots.move_to_end(key)
            return kept
        text = await self.context.client.get(self.context.keys.recipe(scope, job))
        if text is None:
            raise ValueError(f"job {scope}/{job} has an execution state but no recipe snapshot")
        data = json.loads(text)
        snapshot = Snapshot(
            self.chart(data["recipe"]), data["parameters"], data["recipe"], data.get("run", "")
        )
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

    async def executor(self, scope: str, job: str, run: str | None = None) -> Executor:
        """An executor for the job's chart and parameters (``run``: as for ``get``)."""
        snapshot = await self.get(scope, job, run)
        return self.context.executor(snapshot.chart, snapshot.parameters)
