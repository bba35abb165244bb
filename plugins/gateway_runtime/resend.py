"""Commands to equipment that came back online, sent again while their timeout allows.

A command published while its equipment was away may never have reached it (a device that
reconnects with a clean session loses what came meanwhile; one that restarted lost what it was
doing). When the equipment hub sees the equipment come back (its first heartbeat after it was
offline), every command still waiting for that equipment's reply is sent again, with the same
correlation id (``{job}:{action}:{attempt}``), so equipment that did get it the first time
recognises the repetition. A command whose action's deadline has passed is left to its timeout.
"""

from __future__ import annotations

import logging
import time

from gateway.formats import Phase, Status
from gateway_runtime.context import EngineContext
from gateway_runtime.executions import ExecutionStore
from gateway_runtime.scopes import ScopeRegistry
from gateway_runtime.snapshots import RecipeCache
from gateway_runtime.work import WorkQueue

log = logging.getLogger(__name__)

_RUNNING = (Status.RUNNING, Status.PAUSED, Status.HELD, Status.COMPENSATING)


class Resender:
    def __init__(
        self,
        context: EngineContext,
        scopes: ScopeRegistry,
        executions: ExecutionStore,
        recipes: RecipeCache,
        work: WorkQueue,
    ) -> None:
        self.context = context
        self.scopes = scopes
        self.executions = executions
        self.recipes = recipes
        self.work = work

    async def equipment_back(self, equipment_id: str) -> int:
        """Queue a send of every unanswered command for ``equipment_id``; returns how many."""
        keys, now, sent = self.context.keys, time.time(), 0
        for scope in list(self.scopes.scopes):
            for job in sorted(await self.scopes.members(keys.active(scope))):
                execution = await self.executions.read(scope, job)
                if execution is None or execution.status not in _RUNNING:
                    continue
                waiting = [
                    run
                    for run in execution.actions.values()
                    if run.phase is Phase.DISPATCHED
                    and (run.deadline is None or run.deadline > now)
                ]
                if not waiting:
                    continue
                snapshot = await self.recipes.get(scope, job, execution.run, execution.recipe)
                for run in waiting:
                    if snapshot.action(run.name).equipment != equipment_id:
                        continue
                    log.info(
                        "job %s/%s: %s is back; sending %s:%s:%d again",
                        scope,
                        job,
                        equipment_id,
                        job,
                        run.name,
                        run.attempt,
                    )
                    fields = {"kind": "send", "job": job, "action": run.name}
                    await self.work.enqueue(scope, {**fields, "attempt": str(run.attempt)})
                    sent += 1
        return sent
