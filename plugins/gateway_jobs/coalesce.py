"""Work that follows a change, off the path of whoever made the change, merged per scope.

``Coalescer.request(scope)`` asks for ``work(scope)`` to run soon and returns at once, so an MES
call is answered as soon as its change is committed and announced, not after the work that
follows it (a dispatch pass, the retained queue). The work reads what is stored when it runs,
so one run covers every request made before it started: requests arriving while the scope's
work runs are merged into one more run after it. At most one run per scope is in flight, and
runs of one scope start at least ``interval`` seconds apart (the first after a quiet spell
starts at once).

The runs belong to the task group of ``serve`` (a service of the gateway): stopping it cancels
them, and a request then runs its work in the caller, as it does when nothing serves (job
management used without its services, e.g. in tests of its decisions). Work a dying process
leaves undone is what the periodic passes redo (see the callers).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger(__name__)

Work = Callable[[str], Awaitable[object]]


class ServedTasks:
    """The task group that runs work off its callers' path while a service serves it
    (``group`` is ``None`` otherwise: the callers then do the work themselves)."""

    def __init__(self) -> None:
        self.group: TaskGroup | None = None

    async def serve(self, stopped: Callable[[], object] = lambda: None) -> None:
        """Hold the group open until cancelled (which cancels the work in it); ``stopped``
        runs once it no longer takes work."""
        async with anyio.create_task_group() as tasks:
            self.group = tasks
            try:
                await anyio.sleep_forever()
            finally:
                self.group = None
                stopped()


class Coalescer:
    """Runs ``work(scope)`` after requests for it: one run at a time per scope, merged."""

    def __init__(
        self,
        name: str,
        work: Work,
        *,
        interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name  # for log lines: what the work is
        self.work = work
        self.interval = interval
        self.clock = clock
        self._served = ServedTasks()
        self._wanted: set[str] = set()  # scopes with a request not yet taken by a run
        self._draining: set[str] = set()  # scopes with a task running their work
        self._last_start: dict[str, float] = {}
        self._starts: dict[str, int] = {}  # runs started per scope, ever

    def starts(self, scope: str) -> int:
        """How many runs of ``scope``'s work have started (a run started after a change covers
        it: the work reads what is stored when it runs)."""
        return self._starts.get(scope, 0)

    @property
    def serving(self) -> bool:
        return self._served.group is not None

    async def request(self, scope: str) -> None:
        """Have ``work(scope)`` run after this call (in the background when served)."""
        tasks = self._served.group
        if tasks is None:
            await self._run(scope)
            return
        self._wanted.add(scope)
        if scope not in self._draining:
            self._draining.add(scope)
            tasks.start_soon(self._drain, scope)

    def idle(self) -> bool:
        """Nothing requested is waiting or running."""
        return not self._wanted and not self._draining

    async def serve(self) -> None:
        """Run the requested work until cancelled (which cancels the runs in progress)."""
        await self._served.serve(stopped=self._wanted.clear)

    async def _drain(self, scope: str) -> None:
        try:
            while scope in self._wanted:
                wait = self._last_start.get(scope, -math.inf) + self.interval - self.clock()
                if wait > 0:
                    await anyio.sleep(wait)  # requests meanwhile join this run
                self._wanted.discard(scope)
                self._last_start[scope] = self.clock()
                await self._run(scope)
        finally:
            self._draining.discard(scope)

    async def _run(self, scope: str) -> None:
        self._starts[scope] = self._starts.get(scope, 0) + 1
        try:
            await self.work(scope)
        except Exception as error:  # the change stands; the periodic pass does it later
            log.warning("%s of scope %s failed: %s", self.name, scope, error)
