"""The dispatcher: lets queued jobs start as the scope's capacity, equipment and state allow.

``Dispatcher.dispatch(scope)`` runs the ``queue.DISPATCH`` script (admitting jobs atomically,
see ``queue``) and hands each admitted job to its recipe interpreter. Job management asks for a
pass (``request``) after every change that may let a job start (a job entered AllowedToStart,
ended, left the queue, was updated; the capacity or the online state changed); the pass runs in
the background, after the MES has its reply, and requests made while a scope's pass runs are
merged into one more pass (``coalesce``).

A pass asked for because a job freed its slot and equipment (it ended, or left the queue) waits
up to ``release_delay`` first, and is dropped if another pass of the scope starts meanwhile: that
one reads the queue after the release and covers it. An MES that clears an ended job and stores
the next one at once so has one pass per job, the Store's, instead of two (one Redis script
fewer per job); a queued job that waited for the freed slot starts at most ``release_delay``
later. The ``DispatchService`` on every instance serves those
passes and runs one for every scope periodically and when a queued job's StartTime comes, which
also covers an instance that died after a change and before its pass, or between admitting a
job and handing it over (the SFC engine's reconciliation starts admitted jobs it does not run;
``startable`` lists them).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gateway.jobstates import TopState
from gateway.store import Store
from gateway_jobs.coalesce import Coalescer
from gateway_jobs.queue import (
    DISPATCH,
    ENQUEUE,
    Blocked,
    QueueKeys,
    QueueView,
    entry_equipment,
    read_queue,
    scripted_view,
)
from gateway_jobs.roles import JOB_CHANGING_ROLES

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

Start = Callable[[str, str], Awaitable[None]]
Feed = Callable[[str, QueueView], Awaitable[None]]  # the scope's queue, as a pass left it


class Dispatcher:
    """The queue of every scope of one store."""

    def __init__(
        self,
        store: Store,
        *,
        capacity: int,
        start: Start,
        clock: Callable[[], float] = time.time,
        release_delay: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.store = store
        self.keys = QueueKeys(store)
        # Jobs a scope runs at once (0: unlimited) unless its config.jobacceptance says
        # MaxRunningJobOrders, which is read with the queue (``queue.DISPATCH``, ``read_queue``).
        self.capacity = capacity
        self.start = start  # hands an admitted job to its interpreter
        self.clock = clock
        self.feed: Feed | None = None  # told after each pass (``queuefeed``)
        # Called by the periodic pass with the jobs in AllowedToStart its script found neither
        # queued nor admitted (stored by a version without the queue): queues them.
        self.adopt: Callable[[str, Sequence[str]], Awaitable[None]] | None = None
        self._tasks: TaskGroup | None = None  # set while the service runs: StartTime wake-ups
        self._wake_at: dict[str, float] = {}
        self.passes = Coalescer("dispatching", self.dispatch)  # requested after changes
        self.release_delay = release_delay  # a pass after a release waits this long for another
        self.sleep = sleep
        # Scopes with a release's pass waiting: the passes started as of the latest release.
        self._releases: dict[str, int] = {}

    async def request(self, scope: str, *, released: bool = False) -> None:
        """A pass over ``scope`` soon, after the caller (in the caller when nobody serves).
        ``released``: a job freed what it held; the pass may wait for another (see above)."""
        tasks = self._tasks
        if not released or self.release_delay <= 0 or tasks is None or not self.passes.serving:
            await self.passes.request(scope)
        else:
            waiting = scope in self._releases
            self._releases[scope] = self.passes.starts(scope)  # a pass after this one covers it
            if not waiting:
                tasks.start_soon(self._after_release, scope)

    def idle(self) -> bool:
        """No pass requested, waiting or running."""
        return self.passes.idle() and not self._releases

    async def _after_release(self, scope: str) -> None:
        try:
            await self.sleep(self.release_delay)
        finally:
            starts = self._releases.pop(scope, None)
        if starts is not None and self.passes.starts(scope) == starts:  # none since: this one
            await self.passes.request(scope)

    async def dispatch(self, scope: str, *, verify: bool = False) -> list[str]:
        """Admit what may start now and start it; returns the admitted jobs. ``verify``: drop
        entries whose job is no longer in a state that may hold one (the periodic pass)."""
        admitted, _ = await self._pass(scope, verify)
        return admitted

    async def _pass(self, scope: str, verify: bool) -> tuple[list[str], list[str]]:
        """The admitted jobs, and (``verify``) the jobs in AllowedToStart with no queue entry."""
        keys = self.keys
        script = self.store.client.register_script(DISPATCH)
        admitted, due, view, unqueued = await script(
            keys=[
                keys.waiting(scope),
                keys.arrival(scope),
                keys.admitted(scope),
                keys.online(scope),
                keys.state(scope, TopState.RUNNING),
                keys.state(scope, TopState.INTERRUPTED),
                keys.state(scope, TopState.ALLOWED_TO_START),
                keys.acceptance(scope),
                keys.blocked(scope),
            ],
            args=[
                repr(self.clock()),
                self.capacity,
                "1" if verify else "0",
                "0" if self.feed is None else "1",  # the queue as it leaves it, for the feed
            ],
        )
        if due:
            self._wake(scope, float(due))
        async with anyio.create_task_group() as handing:  # side by side: a burst of Stores
            for job in admitted:  # admits many at once, and each start waits on the store
                handing.start_soon(self._hand_over, scope, str(job))
        if self.feed is not None and view:
            try:
                await self.feed(scope, scripted_view(view, self.capacity))
            except Exception as error:  # the next pass publishes it
                log.info("queue of %s not published: %s", scope, error)
        return [str(job) for job in admitted], [str(job) for job in unqueued]

    async def _hand_over(self, scope: str, job: str) -> None:
        log.info("job %s/%s: its turn; starting it", scope, job)
        try:
            await self.start(scope, job)
        except Exception:  # admitted: the engine's reconciliation starts it
            log.exception("job %s/%s: admitted but not handed over", scope, job)

    async def admitted_equipment(self, scope: str, job_order_id: str) -> list[str] | None:
        """The equipment the job was let start with; ``None``: it was not let start."""
        entry = await self.store.client.hget(self.keys.admitted(scope), job_order_id)
        return None if entry is None else list(entry_equipment(entry))

    async def queue(self, scope: str) -> QueueView:
        return await read_queue(self.keys, scope, self.capacity)

    async def block(
        self, scope: str, job_order_id: str, equipment: Sequence[str], reason: str
    ) -> None:
        """Block ``equipment`` for new jobs until acknowledged. Equipment another job's failure
        blocked keeps that reason; this job's own block takes the new one (a rollback under way
        that ended unsafe)."""
        if not equipment:
            return
        key = self.keys.blocked(scope)
        entry = Blocked(job_order_id, reason, self.clock()).json()
        for item in sorted(set(equipment)):
            held = await self.store.client.hget(key, item)
            if held is None or Blocked.of(held).job_order_id == job_order_id:
                await self.store.client.hset(key, item, entry)

    async def acknowledge(
        self, scope: str, equipment: Sequence[str] | None, *, blocked_by: str | None = None
    ) -> dict[str, Blocked]:
        """Release blocked ``equipment`` (``None``: all; ``blocked_by``: only what that job
        blocked); what was released. A pass follows: the jobs waiting for it may start."""
        key = self.keys.blocked(scope)
        released: dict[str, Blocked] = {}
        for name, text in (await self.store.client.hgetall(key)).items():
            wanted = (equipment is None or name in equipment) and (
                blocked_by is None or Blocked.of(text).job_order_id == blocked_by
            )
            # HDEL answers whether this call removed it: two acknowledgements at once release
            # it once.
            if wanted and await self.store.client.hdel(key, name):
                released[str(name)] = Blocked.of(text)
        if released:
            await self.request(scope)
        return released

    async def admitted_waiting(self, scope: str) -> list[str]:
        """Jobs let start that have not started running yet (``JobControl.startable``)."""
        jobs = sorted(await self.store.client.hkeys(self.keys.admitted(scope)))
        if not jobs:
            return []
        flags = await self.store.client.smismember(
            self.keys.state(scope, TopState.ALLOWED_TO_START), jobs
        )
        return [str(job) for job, allowed in zip(jobs, flags, strict=True) if allowed]

    async def sweep(self) -> None:
        """Dispatch every scope the store knows (the service's periodic pass)."""
        for scope in sorted(await self.store.known_scopes()):
            _, unqueued = await self._pass(scope, verify=True)
            if unqueued and self.adopt is not None:  # rare: their turn comes in a pass now
                await self.adopt(scope, sorted(unqueued))
                await self.dispatch(scope)

    async def enqueue(self, scope: str, job_order_id: str, entry: str) -> None:
        """Queue a job outside a state change (``adopt``); never one already let start."""
        keys = self.keys
        script = self.store.client.register_script(ENQUEUE)
        await script(
            keys=[keys.waiting(scope), keys.arrival(scope), keys.admitted(scope), keys.seq(scope)],
            args=[job_order_id, entry],
        )

    def _wake(self, scope: str, due: float) -> None:
        """Dispatch ``scope`` again when ``due`` (a queued job's StartTime) comes."""
        tasks = self._tasks
        scheduled = self._wake_at.get(scope, math.inf)
        if tasks is None or due >= scheduled:
            return
        self._wake_at[scope] = due
        tasks.start_soon(self._wake_later, scope, due)

    async def _wake_later(self, scope: str, due: float) -> None:
        await anyio.sleep(max(0.0, due - self.clock()))
        if self._wake_at.get(scope) == due:
            del self._wake_at[scope]
        try:
            await self.dispatch(scope)
        except Exception as error:  # the periodic sweep tries again
            log.warning("dispatching %s at a StartTime failed: %s", scope, error)

    async def serve(self, gateway: Gateway, poll_seconds: float) -> None:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self.passes.serve)
            try:
                try:  # at start: what waited while no instance ran
                    await self.sweep()
                except Exception as error:
                    log.warning("first dispatch pass failed: %s", error)
                await gateway.resilience.every("jobs.dispatch", poll_seconds, self.sweep)
            finally:
                self._tasks = None
                self._wake_at.clear()


class DispatchService:
    """Runs the dispatcher's periodic pass and StartTime wake-ups on every gateway instance."""

    name = "jobs-dispatch"
    roles = JOB_CHANGING_ROLES

    def __init__(self, dispatcher: Dispatcher, poll_seconds: float) -> None:
        self.dispatcher = dispatcher
        self.poll_seconds = poll_seconds

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.dispatcher.serve, gateway, self.poll_seconds)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()
