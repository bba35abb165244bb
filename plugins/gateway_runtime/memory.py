"""What an instance keeps in memory of jobs: the jobs in progress, not the jobs done.

Each instance caches, per job it handled something of, the job's recipe snapshot
(``snapshots.RecipeCache``) and the last execution state it committed
(``executions.ExecutionStore``), whichever instance runs the job. ``JobMemory`` owns those
caches (``Lru``, one per kind):

- a job's entries go from every cache of every instance when the job ends: the instance that
  handles the recipe's end forgets it there and then, and each instance follows the status
  events of its scopes (``gateway.jobmethods.StatusFeed``, the change streams every instance's
  changes are on) and forgets a job whose state turns final (Ended, Aborted) or that leaves
  the station (Clear, Cancel). That feed is paced (``JOB_END_PACE_SECONDS``): it tidies up
  after other instances, nothing waits for it;
- the caches hold at most ``limit`` jobs, sized from the scopes' capacity
  (``MaxRunningJobOrders``, read again every ``runtime.reconcile_seconds``): twice the jobs
  that can be in progress, for the jobs that ended and whose end is on its way while their
  successors start (``cache_limit``). The limit is a bound for what the feed cannot say (a
  job cached as it ends on a scope this instance just adopted, a feed down with its store),
  never how entries usually go.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gateway.jobstates import JobState
from gateway_runtime.context import EngineContext
from gateway_runtime.scopes import ScopeRegistry

if TYPE_CHECKING:
    from gateway.jobmethods import JobMethods

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
JobKey = tuple[str, str]  # scope, job

CAPACITY_MARGIN = 2  # jobs kept per slot: the one in progress and the one that just ended
# The change streams are read at most this often while changes keep coming: an end committed
# here is forgotten here at once (the runtime's own report), so the feed only tidies up after
# ends other instances (or the MES) committed, and a read per change would cost the store a
# command per change for nothing urgent. The first change after a quiet spell comes at once.
JOB_END_PACE_SECONDS = 1.0


def cache_limit(
    capacities: Mapping[str, int], unlimited: int, running: Mapping[str, int] | None = None
) -> int:
    """The jobs an instance keeps in memory: ``CAPACITY_MARGIN`` per job each scope can run at
    once (``capacities``: scope -> ``MaxRunningJobOrders``); for a scope that runs any number
    (capacity 0), ``unlimited`` or ``CAPACITY_MARGIN`` per job it runs now (``running``: scope
    -> jobs let start), whichever is more, so a busy scope's jobs are not read again at each
    step; ``unlimited`` too while no scope is known."""
    if not capacities:
        return unlimited
    running = running or {}
    return sum(
        CAPACITY_MARGIN * capacity
        if capacity > 0
        else max(unlimited, CAPACITY_MARGIN * running.get(scope, 0))
        for scope, capacity in capacities.items()
    )


def ends_job(state: JobState) -> bool:
    """Whether a job in ``state`` is done with its recipe's memory (final, or gone)."""
    return state.final or state is JobState.END


class Lru(Generic[K, V]):
    """The most recently used entries, at most ``limit()`` of them (read on every insert, so
    a new limit applies at the next one)."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > max(1, self._limit()):
            self._entries.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))


class JobMemory:
    """The per-job caches of one instance, their limit, and forgetting ended jobs."""

    def __init__(self, context: EngineContext, scopes: ScopeRegistry) -> None:
        self.context = context
        self.scopes = scopes
        self.limit = context.settings.unlimited_scope_jobs_kept
        self.followed: frozenset[str] = frozenset()  # scopes whose job ends this instance hears
        self._caches: list[Lru[JobKey, Any]] = []
        self._feeds: TaskGroup | None = None
        self._feed: anyio.CancelScope | None = None

    def cache(self) -> Lru[JobKey, Any]:
        """A new per-job cache under this memory's limit, emptied of each job that ends."""
        cache: Lru[JobKey, Any] = Lru(lambda: self.limit)
        self._caches.append(cache)
        return cache

    @property
    def caches(self) -> Sequence[Lru[JobKey, Any]]:
        """The per-job caches, in the order they were made."""
        return tuple(self._caches)

    def forget(self, scope: str, job: str) -> None:
        """The job ended (or is gone): nothing of it is kept any more."""
        for cache in self._caches:
            cache.pop((scope, job))

    def jobs(self) -> set[JobKey]:
        """The jobs something is kept of (for tests and metrics)."""
        return {key for cache in self._caches for key in cache}

    async def resize(self) -> None:
        """Size the caches from the capacity of the scopes this instance works for."""
        control = self.context.gateway.job_control
        queues = {scope: await control.queue(scope) for scope in self.scopes.scopes}
        limit = cache_limit(
            {scope: queue.capacity for scope, queue in queues.items()},
            self.context.settings.unlimited_scope_jobs_kept,
            {scope: len(queue.running) for scope, queue in queues.items()},
        )
        if limit != self.limit:
            log.debug("recipe runtime: jobs kept in memory at most %d", limit)
            self.limit = limit

    async def follow(self, methods: JobMethods) -> None:
        """Forget the jobs that end, on any instance, until cancelled (a service's loop)."""
        resilience = self.context.gateway.resilience
        try:
            async with anyio.create_task_group() as feeds:
                self._feeds = feeds
                await resilience.forever(
                    "recipe-runtime.job-ends",
                    lambda: self._follow_scopes(methods),
                    interval=self.context.settings.scope_poll_seconds,
                    logger=log,
                )
        finally:
            self._feeds = self._feed = None
            self.followed = frozenset()

    async def _follow_scopes(self, methods: JobMethods) -> None:
        """Follow the scopes this instance works for now: a new feed over all of them, entered
        before the one it replaces stops (no end between the two is missed); then forget the
        jobs of newly followed scopes that ended before."""
        wanted = frozenset(self.scopes.scopes)
        if wanted == self.followed:
            await self.resize()  # an unlimited scope's limit follows the jobs it runs
            return
        assert self._feeds is not None
        feed = await self._feeds.start(self._forget_ends, methods, sorted(wanted))
        if self._feed is not None:
            self._feed.cancel()
        self._feed = feed
        added = wanted - self.followed
        await self._forget_ended({key for key in self.jobs() if key[0] in added})
        self.followed = wanted  # only now: a failed look-up is made again at the next pass
        await self.resize()

    async def _forget_ends(
        self,
        methods: JobMethods,
        scopes: Sequence[str],
        *,
        task_status: TaskStatus[anyio.CancelScope],
    ) -> None:
        started = False
        with anyio.CancelScope() as cancel:
            try:
                # States alone: the documents would cost a read per change for nothing.
                feeding = methods.status_feed(
                    scopes, documents=False, pace_seconds=JOB_END_PACE_SECONDS
                )
                async with feeding as feed:
                    task_status.started(cancel)
                    started = True
                    async for status in feed:
                        if ends_job(status.state):
                            self.forget(status.scope, status.job_order_id)
            except Exception:
                if not started:
                    raise  # not entered: the pass that started it fails, and is tried again
                # The engine runs on; the next pass follows the scopes again.
                log.exception("recipe runtime: following the status events of %s", scopes)
                if self._feed is cancel:
                    self._feed, self.followed = None, frozenset()

    async def _forget_ended(self, jobs: set[JobKey]) -> None:
        """Forget those of ``jobs`` that ended before their scope's events were followed."""
        control = self.context.gateway.job_control
        for scope, job in jobs:
            state = await control.state(scope, job)
            if state is None or ends_job(state):
                self.forget(scope, job)
