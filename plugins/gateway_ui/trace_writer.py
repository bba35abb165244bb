"""``TraceWriter``: the service that appends the queued trace entries to the jobs' streams.

The hooks queue entries in memory (``add``: no I/O). The writer writes them ``ui.trace_flush_ms``
after the first of them was queued (what a job did meanwhile, a step's reply, its steps left and
entered and its next command, goes together), so an entry is visible in Redis at most that long
plus a write after it happened, and a quiet station's burst of entries costs one write, not two.
A flush costs one Lua script call per scope (``WRITE``, of about ``HAPPENINGS_PER_WRITE``):
per job it starts the trace afresh (``DEL``) when the job was stored, appends the job's entries
(one stream entry per flush, up to ``HAPPENINGS_PER_ENTRY`` happenings, see
``gateway_ui.trace``; a refused call only to a trace that exists), and sets the trace's expiry
when the job ended. A round trip before it is needed only for the scope of a reply that does
not name it (equipment that does not echo the command's subject) and whose job has no other
entry in the flush: the known scopes are asked which has the job's trace, in one pipeline
(rare). So the trace keeps no key but the traces themselves, none of which can outlive its
expiry once its job ended.

The writer keeps nothing about a job beyond the queue: a trace is cut to its newest
``ui.trace_max_entries`` stream entries by the XADD itself (``MAXLEN``), which is right
whichever instances wrote them, and a scope is looked up rather than remembered. So its
memory is the queue (at most ``ui.trace_buffer`` entries), however many jobs the station has
run, and no instance holds anything of a job another instance ended.

While Redis is away the queue keeps the newest ``ui.trace_buffer`` entries, the readiness
check ``ui.trace`` fails, and the flush is retried; stopping makes one last (shielded) flush.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from typing import TYPE_CHECKING, cast

import anyio
from anyio.abc import TaskStatus

from gateway.resilience import is_transient
from gateway_ui.settings import UiSettings
from gateway_ui.trace import TraceEntry, stream_record, trace_key

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from gateway.app import Gateway
    from gateway.phases import ServicePhase
    from gateway.store import Store

log = logging.getLogger(__name__)

# A stream entry holds the happenings of one flush for the job, at most this many (a queue
# refilled after an outage may hold thousands for one job): a trace of ``trace_max_entries``
# entries holds at most this many times as many happenings.
HAPPENINGS_PER_ENTRY = 10
# A flush writes its jobs in script calls of about this many happenings (a job's all in one
# call): building and sending a call holds the event loop, and a pipeline of a few hundred jobs
# held it for tens of milliseconds, which the MES's calls and the steps waited out. 200 is
# about a millisecond or two, and 40 busy jobs' 100 ms of happenings.
HAPPENINGS_PER_WRITE = 200
STOP_FLUSH_SECONDS = 2  # how long stopping may take to write what is queued

# What one flush writes for the jobs of one scope, in one call (one hash slot: the scope's).
# KEYS: each job's trace. ARGV: MAXLEN, the expiry, then per job: its flags (s: stored, starts
# afresh; e: ended; r: refused calls only, written to a trace that exists), its number of stream
# entries, and each entry as its number of strings followed by its field/value strings.
WRITE = """
local maxlen, kept = ARGV[1], ARGV[2]
local at = 3
for k = 1, #KEYS do
  local key, flags, entries = KEYS[k], ARGV[at], tonumber(ARGV[at + 1])
  at = at + 2
  local write = not string.find(flags, 'r', 1, true) or redis.call('EXISTS', key) == 1
  if string.find(flags, 's', 1, true) then
    redis.call('DEL', key)
  end
  for _ = 1, entries do
    local strings = tonumber(ARGV[at])
    if write then
      redis.call('XADD', key, 'MAXLEN', maxlen, '*', unpack(ARGV, at + 1, at + strings))
    end
    at = at + 1 + strings
  end
  if string.find(flags, 'e', 1, true) then
    redis.call('EXPIRE', key, kept)
  end
end
return 0
"""


@dataclass
class _JobWrite:
    """What one flush writes for one job."""

    scope: str
    job: str
    entries: list[TraceEntry] = field(default_factory=list)
    starts_job: bool = False  # the trace starts afresh (a job id used again)

    def add(self, entry: TraceEntry) -> None:
        if entry.starts_job:  # what came before belongs to the trace it deletes
            self.entries.clear()
            self.starts_job = True
        self.entries.append(entry)

    @property
    def only_refused(self) -> bool:
        """Refused calls alone: written only when the job has a trace (it may not exist)."""
        return not self.starts_job and all(entry.refused for entry in self.entries)

    @property
    def flags(self) -> str:
        ends = any(entry.ends_job for entry in self.entries)
        return "".join(
            flag
            for flag, on in (("s", self.starts_job), ("e", ends), ("r", self.only_refused))
            if on
        )

    def arguments(self, instance: str) -> list[str]:
        """The job's part of ``WRITE``'s ARGV."""
        records = [
            stream_record(self.entries[start : start + HAPPENINGS_PER_ENTRY], instance)
            for start in range(0, len(self.entries), HAPPENINGS_PER_ENTRY)
        ]
        arguments = [self.flags, str(len(records))]
        for record in records:
            arguments.append(str(2 * len(record)))
            for name, value in record.items():
                arguments += (name, value)
        return arguments


def _calls(writes: Iterable[_JobWrite]) -> Iterator[list[_JobWrite]]:
    """``writes`` in calls of about ``HAPPENINGS_PER_WRITE`` happenings."""
    chunk: list[_JobWrite] = []
    happenings = 0
    for write in writes:
        chunk.append(write)
        happenings += len(write.entries)
        if happenings >= HAPPENINGS_PER_WRITE:
            yield chunk
            chunk, happenings = [], 0
    if chunk:
        yield chunk


class TraceWriter:
    """Queues entries from the hooks and appends them to the jobs' streams (a service)."""

    name = "ui-trace"
    roles = frozenset({"gateway", "engine", "jobs"})  # where jobs change or steps run

    def __init__(
        self,
        settings: UiSettings,
        gateway: ServicePhase,
        *,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.queue: deque[TraceEntry] = deque(maxlen=settings.trace_buffer)
        self.dropped = 0
        self.written = 0  # happenings taken from the queue and handled (written or skipped)
        self._wake: anyio.Event | None = None
        self._sleep = sleep  # the flush interval's wait (tests drive it)
        self._script: AsyncScript | None = None

    def add(self, entry: TraceEntry) -> None:
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1  # the oldest goes; said in the log when Redis is back
        self.queue.append(entry)
        if self._wake is not None:
            self._wake.set()

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self._wake = anyio.Event()
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._write_loop, gateway.stopping)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()
        with anyio.move_on_after(STOP_FLUSH_SECONDS, shield=True):  # the last moments
            try:
                while self.queue:  # what the last flush's own hooks may have added too
                    await self.flush()
            except Exception as error:  # the store away at the end: the entries are lost
                log.warning("job trace: %d entries not written: %s", len(self.queue), error)

    async def _write_loop(self, stopping: anyio.Event) -> None:
        """Write what is queued ``trace_flush_ms`` after the first of it came; a store outage
        is retried (logged once, the readiness check ``ui.trace`` failing meanwhile) while the
        queue keeps the newest ``trace_buffer`` entries."""
        resilience = self.gateway.resilience
        interval = self.settings.trace_flush_ms / 1000
        while True:
            assert self._wake is not None
            await self._wake.wait()
            # Pacing, not synchronisation: what arrives meanwhile joins this flush (a step's
            # reply, its steps and its next command come within a few ms of each other).
            if interval > 0:
                await self._sleep(interval)
            self._wake = anyio.Event()
            try:
                await resilience.retry("ui.trace", self.flush, stop=stopping, logger=log)
            except Exception as error:
                if is_transient(error):
                    return  # stopping: ``run`` makes a last attempt
                log.exception("job trace: %d entries not written", len(self.queue))
                self.queue.clear()  # they would fail again

    async def flush(self) -> None:
        """Write what is queued now: one stream entry per job. The entries leave the queue
        for the write and go back to its front when it fails (the newest ``trace_buffer``
        kept), so an outage or a cancelled write loses nothing the buffer can hold."""
        store = self.gateway.store
        if store is None:
            self.queue.clear()
            return
        taken = list(self.queue)
        self.queue.clear()
        written: set[str] = set()  # jobs whose entries are in the store
        try:
            await self._write(store, taken, written)
        except BaseException:
            self._put_back([entry for entry in taken if entry.job not in written])
            raise
        self.written += len(taken)
        if self.dropped:
            log.warning("job trace: %d entries were dropped while Redis was away", self.dropped)
            self.dropped = 0

    def _put_back(self, taken: list[TraceEntry]) -> None:
        newer = list(self.queue)
        self.queue.clear()
        self.queue.extend(taken)  # the deque's bound drops the oldest if it must
        self.queue.extend(newer)
        self.dropped += max(0, len(taken) + len(newer) - len(self.queue))

    async def _write(self, store: Store, entries: list[TraceEntry], written: set[str]) -> None:
        """Write ``entries``, adding each job to ``written`` once its entries are stored: one
        script call per scope and about ``HAPPENINGS_PER_WRITE`` happenings."""
        writes = sorted(await self._group(store, entries), key=lambda write: write.scope)
        instance = self.gateway.instance_id
        for scope, group in groupby(writes, key=lambda write: write.scope):
            for chunk in _calls(group):
                await self._call(store, scope, chunk, instance)
                written.update(write.job for write in chunk)

    async def _call(self, store: Store, scope: str, writes: list[_JobWrite], instance: str) -> None:
        if self._script is None:
            self._script = store.client.register_script(WRITE)
        keys = []
        arguments = [str(self.settings.trace_max_entries), str(self.settings.trace_kept_seconds)]
        for write in writes:
            keys.append(trace_key(store, scope, write.job))
            arguments += write.arguments(instance)
        await self._script(keys=keys, args=arguments)

    async def _group(self, store: Store, entries: list[TraceEntry]) -> list[_JobWrite]:
        """The entries by job, in order (a job's scope looked up when no entry names it)."""
        scopes = {entry.job: entry.scope for entry in entries if entry.scope is not None}
        unknown = {entry.job for entry in entries if entry.job not in scopes}
        if unknown:
            scopes |= await self._look_up_scopes(store, unknown, set(scopes.values()))
        writes: dict[tuple[str, str], _JobWrite] = {}
        for entry in entries:
            scope = entry.scope or scopes.get(entry.job)
            if scope is None:
                log.debug("trace entry for unknown job %s dropped", entry.job)
                continue
            key = (scope, entry.job)
            if key not in writes:
                writes[key] = _JobWrite(scope, entry.job)
            writes[key].add(entry)
        return list(writes.values())

    async def _look_up_scopes(
        self, store: Store, jobs: Iterable[str], seen: set[str]
    ) -> dict[str, str]:
        """The scopes of jobs no entry of the flush names one for: the scope (of those known
        and those of this flush) that holds the job's trace, a running job's (no expiry) before
        an ended one's, asked in one pipeline."""
        ordered = list(jobs)
        scopes = sorted(await store.known_scopes() | seen)
        pairs = [(scope, job) for scope in scopes for job in ordered]
        async with store.client.pipeline(transaction=False) as pipe:
            for scope, job in pairs:
                pipe.pttl(trace_key(store, scope, job))
            found = cast(list[int], await pipe.execute())
        located: dict[str, str] = {}
        # -2: no trace, -1: a running job's, more: an ended job's, kept a while.
        for (scope, job), ttl in sorted(zip(pairs, found, strict=True), key=lambda hit: hit[1]):
            if ttl != -2:
                located.setdefault(job, scope)
        return located
