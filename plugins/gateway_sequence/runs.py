"""Where sequence runs live in Redis, and the compare-and-swap every change goes through.

Keys (through the store's key schema, so every scoped key carries the scope's hash tag):

- ``seq:run:<job>`` per scope: the run (``gateway_sequence.state``), JSON with a version;
- ``seq:timers`` per scope, sorted by due time: each try's timeout, and each command stored as
  sent until its publication is confirmed (an instance that dies in between leaves it, and
  another sends it again); every instance looks for due ones;
- ``seq:active`` per scope: the jobs whose run has not ended, for reconciliation;
- ``seq:scopes`` and ``seq:job-scope:<job>`` (global): the scopes that ran a sequence, and the
  job's scope for equipment replies that do not say it (it expires with the ended run).

A change is read, applied and written in one ``Store.transaction`` watching the run's key, with
its timers in the same commit: a conflict with another instance reads again and re-applies.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from redis.exceptions import WatchError

from gateway.errors import GatewayError
from gateway.resilience import is_transient
from gateway.store import Store
from gateway_sequence.executor import Effects
from gateway_sequence.settings import SequenceSettings
from gateway_sequence.state import Run, Status, dump_run, load_run

log = logging.getLogger(__name__)

LEGACY_BATCH = 100  # entries of an earlier version's job -> scope hash looked at per call

Apply = Callable[[Run, float], Effects]


class TimerKind(StrEnum):
    TIMEOUT = "timeout"  # the try's reply is overdue
    SEND = "send"  # the try's command was stored as sent, its publication not yet confirmed


@dataclass(frozen=True)
class TimerEntry:
    job: str
    step: str
    attempt: int
    kind: TimerKind

    def member(self) -> str:
        return json.dumps([self.job, self.step, self.attempt, self.kind.value])

    @classmethod
    def parse(cls, member: str) -> TimerEntry:
        job, step, attempt, kind = json.loads(member)
        return cls(str(job), str(step), int(attempt), TimerKind(kind))


def numbered_on(earlier: Run) -> dict[str, int]:
    """The last attempt of each step over ``earlier`` and the runs before it."""
    attempts = dict(earlier.earlier_attempts)
    attempts.update((name, step.attempt) for name, step in earlier.steps.items())
    return attempts


class _Unchanged(Exception):
    """Leaves a transaction without writing (the stimulus changed nothing)."""


class _NotCreated(Exception):
    def __init__(self, created: Created) -> None:
        self.created = created


class Created(StrEnum):
    """What ``RunStore.create`` did."""

    NEW = "new"
    EXISTS = "exists"  # this job order's run is stored already (another instance's, a retry)
    EARLIER_RUNS = "earlier-runs"  # the run of a job order stored before under the id has not
    # ended yet (MES Stop, Clear and Store back to back): started once it has


class RunStore:
    """Reads, creates and compare-and-swaps the runs of one gateway's store."""

    def __init__(self, store: Callable[[], Store], settings: SequenceSettings) -> None:
        self._store = store  # the store connects only when the gateway runs: asked each time
        self.settings = settings

    @property
    def store(self) -> Store:
        return self._store()

    # -- keys -------------------------------------------------------------------------------

    def run_key(self, scope: str, job: str) -> str:
        return self.store.keys.scoped(scope, "seq", "run", job)

    def timers_key(self, scope: str) -> str:
        return self.store.keys.scoped(scope, "seq", "timers")

    def active_key(self, scope: str) -> str:
        return self.store.keys.scoped(scope, "seq", "active")

    @property
    def scopes_key(self) -> str:
        return self.store.keys.global_key("seq", "scopes")

    def job_scope_key(self, job: str) -> str:
        """The job's scope, for replies that do not say it; it expires with the ended run."""
        return self.store.keys.global_key("seq", "job-scope", job)

    @property
    def job_scopes_key(self) -> str:
        """The job -> scope hash earlier versions wrote (read for their runs still going)."""
        return self.store.keys.global_key("seq", "job-scopes")

    # -- reads ------------------------------------------------------------------------------

    async def read(self, scope: str, job: str) -> Run | None:
        data = await self.store.get_json(self.run_key(scope, job))
        return None if data is None else load_run(data)

    async def job_scope(self, job: str) -> str | None:
        scope = await self.store.client.get(self.job_scope_key(job))
        if scope is None:  # a run an earlier version started
            scope = await self.store.client.hget(self.job_scopes_key, job)
        return None if scope is None else str(scope)

    async def legacy_job_scopes(self, cursor: int) -> tuple[int, dict[str, str]]:
        """A part of an earlier version's job -> scope hash, from ``cursor`` (``0``: from the
        start; the next cursor is ``0`` again once all was seen)."""
        next_cursor, entries = await self.store.client.hscan(
            self.job_scopes_key, cursor, count=LEGACY_BATCH
        )
        return int(next_cursor), cast(dict[str, str], entries)

    async def drop_legacy_job_scopes(self, jobs: list[str]) -> None:
        await self.store.client.hdel(self.job_scopes_key, *jobs)

    async def scopes(self) -> list[str]:
        return sorted(str(scope) for scope in await self.store.client.smembers(self.scopes_key))

    async def active(self, scope: str) -> list[str]:
        return sorted(str(job) for job in await self.store.client.smembers(self.active_key(scope)))

    async def due(self, scope: str, now: float, count: int = 100) -> list[TimerEntry]:
        members = await self.store.client.zrangebyscore(
            self.timers_key(scope), "-inf", now, start=0, num=count
        )
        return [TimerEntry.parse(str(member)) for member in members]

    async def drop(self, scope: str, *entries: TimerEntry) -> None:
        if entries:
            await self.store.client.zrem(self.timers_key(scope), *(e.member() for e in entries))

    # -- writes -----------------------------------------------------------------------------

    async def create(self, run: Run) -> Created:
        """Store a new run, unless the job has one already. An ended run of an earlier job
        order with the same id (cleared, then stored again) is replaced."""
        client = self.store.client
        # Global keys first (a key of its own slot): a reply that comes before the run exists
        # finds the scope, and discovery finds the scope's timers.
        await client.set(self.job_scope_key(run.job), run.scope)
        await client.sadd(self.scopes_key, run.scope)
        key = self.run_key(run.scope, run.job)
        try:
            async with self.store.transaction(run.scope, watch=[key]) as transaction:
                existing = await transaction.get_json(key)
                if existing is not None:
                    earlier = load_run(existing)
                    if earlier.status is not Status.ENDED:
                        other_order = bool(earlier.stored_at) and earlier.stored_at != run.stored_at
                        raise _NotCreated(Created.EARLIER_RUNS if other_order else Created.EXISTS)
                    run.earlier_attempts = numbered_on(earlier)
                transaction.set_json(key, dump_run(run))
                transaction.pipeline.sadd(self.active_key(run.scope), run.job)
        except WatchError:
            return Created.EXISTS
        except _NotCreated as not_created:
            return not_created.created
        return Created.NEW

    async def mutate(self, scope: str, job: str, apply: Apply) -> tuple[Run, Effects] | None:
        """Apply a stimulus to the stored run and write it if it changed; ``None`` when the job
        has no run (never started here, or ended long ago) or the run has ended."""
        key = self.run_key(scope, job)
        for _ in range(self.settings.max_cas_retries):
            try:
                async with self.store.transaction(scope, watch=[key]) as transaction:
                    data = await transaction.get_json(key)
                    if data is None:
                        return None
                    run = load_run(data)
                    if run.status is Status.ENDED:
                        return None
                    outstanding = run.outstanding()
                    now = time.time()
                    effects = apply(run, now)
                    if not effects.changed:
                        raise _Unchanged
                    answered = outstanding - run.outstanding()
                    ended = self._queue(transaction, run, effects, answered, now)
            except _Unchanged:
                return run, effects
            except WatchError:
                continue  # another instance changed the run: read it again
            if ended:
                await self._forget_scope(job)
            return run, effects
        raise GatewayError(
            f"sequence {scope}/{job}: its state kept changing under "
            f"{self.settings.max_cas_retries} tries"
        )

    async def _forget_scope(self, job: str) -> None:
        """Kept as long as the ended run (a late reply still finds its job), then gone. The
        run's end is committed already: a failure here leaves the key, and is only logged."""
        try:
            async with self.store.client.pipeline(transaction=False) as pipe:
                pipe.expire(self.job_scope_key(job), self.settings.ended_ttl_seconds)
                pipe.hdel(self.job_scopes_key, job)  # an earlier version's entry
                await pipe.execute()
        except Exception as error:
            if not is_transient(error):
                raise
            log.warning(
                "sequence %s ended; its scope key stays (not set to expire): %s", job, error
            )

    def _queue(
        self,
        transaction: Any,
        run: Run,
        effects: Effects,
        answered: set[tuple[str, int]],
        now: float,
    ) -> bool:
        """Queue the run's write and its timers; ``True``: the run has ended."""
        scope, job = run.scope, run.job
        run.version += 1
        ended = run.status is Status.ENDED
        ttl = self.settings.ended_ttl_seconds if ended else None
        transaction.set_json(self.run_key(scope, job), dump_run(run), ttl_seconds=ttl)
        pipeline = transaction.pipeline
        timers = self.timers_key(scope)
        gone = [
            TimerEntry(job, step, attempt, kind).member()
            for step, attempt in sorted(answered)
            for kind in TimerKind
        ]
        if gone:
            pipeline.zrem(timers, *gone)
        due = {
            TimerEntry(job, t.step, t.attempt, TimerKind.TIMEOUT).member(): t.due
            for t in effects.timers
        }
        resend_at = now + self.settings.outbox_grace_seconds
        for step in effects.sends:
            entry = TimerEntry(job, step, run.steps[step].attempt, TimerKind.SEND)
            due[entry.member()] = resend_at
        if due:
            pipeline.zadd(timers, due)
        if ended:
            pipeline.srem(self.active_key(scope), job)
        return ended
