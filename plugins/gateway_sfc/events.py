"""Equipment events to the ``pull_event`` actions waiting for them.

An event goes to the job of its scope that has waited longest for an event of its type (and
equipment, and job when the event names one). An event nobody waits for yet is kept a while
in ``sfc:unclaimed``: it may have overtaken the state change that starts the wait.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from typing import Any, cast

from gateway.equipment import EquipmentEvent
from gateway_sfc.context import EngineContext
from gateway_sfc.engine import Effects, Executor
from gateway_sfc.executions import ExecutionStore, waiting
from gateway_sfc.scopes import ScopeRegistry
from gateway_sfc.snapshots import RecipeCache
from gateway_sfc.state import Execution, Phase

log = logging.getLogger(__name__)

# Take a kept event for a job: whoever removes it owns it. The owner is noted for as long as
# events are kept, so the same claim sent again (a client retrying it after its answer was
# lost with the connection, in a failover) is told yes, not no: else the event would be gone
# with no owner. KEYS[1] the kept events, KEYS[2] the claim's note; ARGV[1] the event as kept,
# ARGV[2] the job, ARGV[3] seconds to keep the note.
CLAIM = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[2] then return 1 end
return 0
"""


class EventRouter:
    def __init__(
        self,
        context: EngineContext,
        executions: ExecutionStore,
        recipes: RecipeCache,
        scopes: ScopeRegistry,
    ) -> None:
        self.context = context
        self.executions = executions
        self.recipes = recipes
        self.scopes = scopes
        self._claim: Any = None

    def start(self) -> None:
        """Called when the engine starts running: the store's client is new on every run."""
        self._claim = self.context.client.register_script(CLAIM)

    async def _waiting_jobs(self, scope: str) -> list[str]:
        key = self.context.keys.waiting(scope)
        return cast(list[str], await self.context.client.zrange(key, 0, -1))

    async def scope_waiting_for(self, event: EquipmentEvent) -> str | None:
        """The first scope (by name) with a job waiting for this event, for events of no scope."""
        wanted = event_fields(event)
        for scope in sorted(self.scopes.scopes):
            for job in await self._waiting_jobs(scope):
                execution = await self.executions.read(scope, job)
                if execution is None:
                    continue
                executor = await self.recipes.executor(scope, job)
                if waiting_action_for(executor, execution, wanted) is not None:
                    return scope
        return None

    async def route(self, scope: str, event: dict[str, Any]) -> None:
        """Give an equipment event to the job that has waited longest for it."""
        for job in await self._waiting_jobs(scope):
            if await self.offer(scope, job, event):
                return
        await self._keep_unclaimed(scope, event)
        # A job may have started waiting after we looked and before the event was kept (its
        # own look at the kept events came too early): look once more from this side.
        for job in await self._waiting_jobs(scope):
            await self.claim_unclaimed(scope, job)

    async def offer(self, scope: str, job: str, event: dict[str, Any]) -> bool:
        taken = False

        def apply(executor: Executor, execution: Execution, now: float) -> Effects:
            nonlocal taken
            action = waiting_action_for(executor, execution, event)
            if action is None:
                return Effects()
            taken = True
            return executor.on_event(execution, action, event.get("data"), now)

        await self.executions.mutate(scope, job, apply)
        return taken

    async def _keep_unclaimed(self, scope: str, event: dict[str, Any]) -> None:
        key = self.context.keys.unclaimed(scope)
        settings = self.context.settings
        event = {**event, "received": time.time()}
        async with self.context.client.pipeline(transaction=True) as pipe:
            pipe.lpush(key, json.dumps(event))
            pipe.ltrim(key, 0, settings.unclaimed_events_kept - 1)
            await pipe.execute()
        log.info(
            "event %s (%s) in %s: no job waits for it yet; kept %.0f s",
            event.get("id"),
            event.get("type"),
            scope,
            settings.unclaimed_event_seconds,
        )

    async def claim_unclaimed(self, scope: str, job: str) -> None:
        """The job started waiting: take the events that arrived just before, if they match."""
        client = self.context.client
        key = self.context.keys.unclaimed(scope)
        oldest_wanted = time.time() - self.context.settings.unclaimed_event_seconds
        executor = await self.recipes.executor(scope, job)
        unclaimed = cast(list[str], await client.lrange(key, 0, -1))
        for text in reversed(unclaimed):  # oldest first
            event = json.loads(text)
            if event.get("received", 0) < oldest_wanted:
                continue
            execution = await self.executions.read(scope, job)
            if execution is None:
                return
            if not waiting(execution):
                return
            if waiting_action_for(executor, execution, event) is None:
                continue
            note = self.context.keys.scoped(
                scope, "claimed", hashlib.sha1(text.encode()).hexdigest()
            )
            seconds = math.ceil(self.context.settings.unclaimed_event_seconds)
            taken = await self._claim(keys=[key, note], args=[text, job, seconds])
            if taken and not await self.offer(scope, job, event):
                await self._keep_unclaimed(scope, event)


def waiting_action_for(
    executor: Executor, execution: Execution, event: Mapping[str, Any]
) -> str | None:
    """The waiting pull_event action this event completes, if any (type, equipment, job)."""
    if event.get("job_order_id") not in (None, execution.job):
        return None
    for run in execution.actions.values():
        if run.phase is not Phase.WAITING:
            continue
        action = next(a for a in executor.recipe.actions if a.name == run.name)
        if action.type_id != event.get("type"):
            continue
        if action.equipment is not None and event.get("equipment") not in (None, action.equipment):
            continue
        return run.name
    return None


def event_fields(event: EquipmentEvent) -> dict[str, Any]:
    """What a work entry carries of an equipment event."""
    return {
        "type": event.type,
        "id": event.id,
        "equipment": event.equipment,
        "job_order_id": event.job_order_id,
        "data": event.data,
    }
