"""Equipment events to the ``pull_event`` actions waiting for them.

An event goes to the job of its scope that has waited longest for an event of its type (and
equipment, and job when the event names one). An event nobody waits for yet is kept a while
in ``rt:unclaimed``: it may have overtaken the state change that starts the wait. A job takes
a kept event in the same script that commits its effect (``gateway_runtime.scripts.COMMIT``), so a
failure between the two can neither lose it nor leave it for a second taker.

An event that names its equipment but no job (a PLC that knows no job ids) belongs to the job
holding that equipment: jobs hold their equipment exclusively from being let start until they
end (job management's allocation, read through ``JobControl.queue``). It is attributed to that
job and routed as if it had named it, so it is kept for that job alone when it comes early. An
event from equipment no job holds goes to a job waiting for it now, if any, and is never kept:
nothing says which later job it would belong to. Events kept for a job that ends go with it.
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
from gateway.formats import Effects, Execution, Executor, Phase, Status
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
        snapshot = await self.recipes.get(scope, job, execution.run, execution.recipe)
        return waiting_action_for(snapshot, execution, event) is not None

    async def holder(self, equipment: str, scope: str | None) -> tuple[str, str] | None:
        """The scope and job holding ``equipment`` (``scope``: where to look; ``None``: every
        scope, by name). Job management lets a job start only with its equipment free, so at
        most one job of a scope holds it."""
        control = self.context.gateway.job_control
        if scope is not None:
            candidates = [scope]
        else:
            candidates = sorted(self.scopes.scopes | await self.context.store.known_scopes())
        for candidate in candidates:
            for job, held in (await control.queue(candidate)).running.items():
                if equipment in held:
                    return candidate, job
        return None

    async def route(self, scope: str, event: dict[str, Any], *, keep: bool = True) -> bool:
        """Give an equipment event to the job that has waited longest for it; ``keep``: keep it
        for a later waiter when none waits now. ``False``: neither taken nor kept."""
        note = self._kept_note(scope, event)
        async with self.context.client.pipeline(transaction=False) as pipe:
            pipe.zrange(self.context.keys.waiting(scope), 0, -1)
            pipe.exists(note)
            waiting_jobs, kept_before = await pipe.execute()
        named = event.get("job_order_id")
        if named is not None:  # only that job may take it: the others need not be asked
            waiting_jobs = [job for job in waiting_jobs if job == named]
        # Kept by an earlier try of this event (its handling failed later on): the kept copy is
        # the only one a job may take, or it could be taken twice.
        if not kept_before:
            for job in waiting_jobs:
                if await _unless_broken(scope, job, self.offer(scope, job, event), False):
                    return True
            if not keep:
                return False
            await self._keep_unclaimed(scope, event, note)
            if named is not None and await self._ended(scope, named):
                # It ended after the event was attributed to it, and its end dropped what was
                # kept for it before this was: nothing will take this one either.
                await self.drop_kept_for(scope, named)
                return True
        # A job may have started waiting after we looked and before the event was kept (its
        # own look at the kept events came too early): look once more from this side.
        for job in await self._waiting_jobs(scope):
            await _unless_broken(scope, job, self.claim_unclaimed(scope, job), None)
        return True

    async def _ended(self, scope: str, job: str) -> bool:
        execution = await self.executions.read(scope, job)
        return execution is not None and execution.status is Status.ENDED

    async def drop_kept_for(self, scope: str, job: str) -> int:
        """The job ended: the events kept for it can no longer be taken; they go now (counted)
        rather than with their age. Returns how many went."""
        client, key = self.context.client, self.context.keys.unclaimed(scope)
        dropped = 0
        for text in cast(list[str], await client.lrange(key, 0, -1)):
            if json.loads(text).get("job_order_id") == job:
                # LREM decides against a job taking it at the same moment (the commit's LREM).
                dropped += int(await client.lrem(key, 1, text))
        if dropped:
            self.context.metrics.events_dropped.labels("job_ended").inc(dropped)
            log.info("job %s/%s ended: %d event(s) kept for it dropped", scope, job, dropped)
        return dropped

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
            snapshot = await self.recipes.get(scope, job, execution.run, execution.recipe)
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
