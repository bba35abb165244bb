"""Equipment events to the ``pull_event`` actions waiting for them.

An event goes to the job of its scope that has waited longest for an event of its type (and
equipment, and job when the event names one). An event nobody waits for yet is kept a while
in ``rt:unclaimed``: it may have overtaken the state change that starts the wait. A job takes
a kept event in the same script that commits its effect (``gateway_runtime.scripts.COMMIT``), so a
failure between the two can neither lose it nor leave it for a second taker.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar, cast

from gateway.equipment import EquipmentEvent
from gateway.formats import Effects, Execution, Executor, Phase
from gateway.resilience import is_transient
from gateway_runtime.context import EngineContext
from gateway_runtime.executions import ExecutionStore, waiting
from gateway_runtime.scopes import ScopeRegistry
from gateway_runtime.snapshots import RecipeCache, Snapshot

log = logging.getLogger(__name__)

T = TypeVar("T")

# Keep an event nobody waits for yet, once: routing it again (a retry after a failure later in
# its handling) must not keep a second copy that a later wait of the same job would take too.
# The note lives as long as the event may be taken. KEYS[1] the kept events, KEYS[2] the
# event's note; ARGV[1] the event as kept, ARGV[2] most events kept, ARGV[3] seconds.
KEEP = """
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[3]) then return 0 end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return 1
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
        self._keep: Any = None

    def start(self) -> None:
        """Called when the engine starts running: the store's client is new on every run."""
        self._keep = self.context.client.register_script(KEEP)

    async def _waiting_jobs(self, scope: str) -> list[str]:
        key = self.context.keys.waiting(scope)
        return cast(list[str], await self.context.client.zrange(key, 0, -1))

    async def scope_waiting_for(self, event: EquipmentEvent) -> str | None:
        """The first scope (by name) with a job waiting for this event, for events of no scope."""
        wanted = event_fields(event)
        for scope in sorted(self.scopes.scopes):
            for job in await self._waiting_jobs(scope):
                if await _unless_broken(scope, job, self._waits_for(scope, job, wanted), False):
                    return scope
        return None

    async def _waits_for(self, scope: str, job: str, event: Mapping[str, Any]) -> bool:
        execution = await self.executions.read(scope, job)
        if execution is None:
            return False
        snapshot = await self.recipes.get(scope, job, execution.run)
        return waiting_action_for(snapshot, execution, event) is not None

    async def route(self, scope: str, event: dict[str, Any]) -> None:
        """Give an equipment event to the job that has waited longest for it."""
        note = self._kept_note(scope, event)
        async with self.context.client.pipeline(transaction=False) as pipe:
            pipe.zrange(self.context.keys.waiting(scope), 0, -1)
            pipe.exists(note)
            waiting_jobs, kept_before = await pipe.execute()
        # Kept by an earlier try of this event (its handling failed later on): the kept copy is
        # the only one a job may take, or it could be taken twice.
        if not kept_before:
            for job in waiting_jobs:
                if await _unless_broken(scope, job, self.offer(scope, job, event), False):
                    return
            await self._keep_unclaimed(scope, event, note)
        # A job may have started waiting after we looked and before the event was kept (its
        # own look at the kept events came too early): look once more from this side.
        for job in await self._waiting_jobs(scope):
            await _unless_broken(scope, job, self.claim_unclaimed(scope, job), None)

    async def offer(
        self, scope: str, job: str, event: dict[str, Any], kept: str | None = None
    ) -> bool:
        """Give the event to the job if it waits for it; ``kept``: the event as kept, taken
        from the kept events with the change (``False`` if another job took it first)."""

        snapshot = await self.recipes.get(scope, job)

        def apply(executor: Executor, execution: Execution, now: float) -> Effects:
            if execution.run != snapshot.run:  # started again meanwhile: asked again later
                return Effects()
            action = waiting_action_for(snapshot, execution, event)
            if action is None:
                return Effects()
            return executor.on_event(execution, action, event.get("data"), now)

        return await self.executions.mutate(scope, job, apply, take=kept)

    def _kept_note(self, scope: str, event: dict[str, Any]) -> str:
        identity = event.get("id") or json.dumps(event, sort_keys=True)
        digest = hashlib.sha1(str(identity).encode()).hexdigest()
        return self.context.keys.scoped(scope, "kept", digest)

    async def _keep_unclaimed(self, scope: str, event: dict[str, Any], note: str) -> None:
        keys, settings = self.context.keys, self.context.settings
        kept = json.dumps({**event, "received": time.time()})
        seconds = math.ceil(settings.unclaimed_event_seconds) or 1
        args = [kept, settings.unclaimed_events_kept, seconds]
        if not await self._keep(keys=[keys.unclaimed(scope), note], args=args):
            return  # kept by an earlier try
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
        unclaimed = cast(list[str], await client.lrange(key, 0, -1))
        for text in reversed(unclaimed):  # oldest first
            event = json.loads(text)
            if event.get("received", 0) < oldest_wanted:
                continue
            execution = await self.executions.read(scope, job)
            if execution is None or not waiting(execution):
                return
            snapshot = await self.recipes.get(scope, job, execution.run)
            if waiting_action_for(snapshot, execution, event) is not None:
                await self.offer(scope, job, event, kept=text)


async def _unless_broken(scope: str, job: str, asking: Awaitable[T], broken: T) -> T:
    """``asking`` a job about an event; ``broken`` when the job cannot take events at all (its
    state or recipe cannot be read), so that one broken job does not keep every event of its
    scope from the others. A failure that may pass is raised: the event is tried again."""
    try:
        return await asking
    except Exception as error:
        if is_transient(error):
            raise
        log.error("job %s/%s cannot take equipment events (%s); asking others", scope, job, error)
        return broken


def waiting_action_for(
    snapshot: Snapshot, execution: Execution, event: Mapping[str, Any]
) -> str | None:
    """The waiting event action this event completes, if any (type, equipment, job)."""
    if event.get("job_order_id") not in (None, execution.job):
        return None
    for run in execution.actions.values():
        if run.phase is not Phase.WAITING:
            continue
        action = snapshot.action(run.name)
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
