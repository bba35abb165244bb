"""``TraceWriter``: the service that appends the queued trace entries to the jobs' streams.

The hooks queue entries in memory (``add``: no I/O). The writer flushes at most every
``ui.trace_flush_ms``: the first entry after a quiet spell goes at once, the ones that follow
wait for the interval and go together. A flush costs one pipeline, one XADD per job in it
(the job's queued happenings in one stream entry, up to ``HAPPENINGS_PER_ENTRY``, see
``gateway_ui.trace``), plus a round trip before it only when it must look something up: the
scope of a reply that does not name it (equipment that does not echo the command's subject)
and whose job has no other entry in the flush, or whether the trace of a job that only
refused calls exists (rare both).

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
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from gateway.resilience import is_transient
from gateway_ui.settings import UiSettings
from gateway_ui.trace import TraceEntry, job_scopes_key, stream_record, trace_key

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.phases import ServicePhase
    from gateway.store import Store

log = logging.getLogger(__name__)

# A stream entry holds the happenings of one flush for the job, at most this many (a queue
# refilled after an outage may hold thousands for one job): a trace of ``trace_max_entries``
# entries holds at most this many times as many happenings.
HAPPENINGS_PER_ENTRY = 10
# A flush writes its jobs in pipelines of this many: building and sending a pipeline holds the
# event loop, and one of a few hundred jobs held it for tens of milliseconds, which the MES's
# calls and the steps waited out.
JOBS_PER_PIPELINE = 16
STOP_FLUSH_SECONDS = 2  # how long stopping may take to write what is queued


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


class TraceWriter:
    """Queues entries from the hooks and appends them to the jobs' streams (a service)."""

    name = "ui-trace"
    roles = frozenset({"gateway", "engine", "jobs"})  # where jobs change or steps run

    def __init__(self, settings: UiSettings, gateway: ServicePhase) -> None:
        self.settings = settings
        self.gateway = gateway
        self.queue: deque[TraceEntry] = deque(maxlen=settings.trace_buffer)
        self.dropped = 0
        self.written = 0  # happenings taken from the queue and handled (written or skipped)
        self._wake: anyio.Event | None = None

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
        """Write what is queued, at most every ``trace_flush_ms``; a store outage is retried
        (logged once, the readiness check ``ui.trace`` failing meanwhile) while the queue
        keeps the newest ``trace_buffer`` entries."""
        resilience = self.gateway.resilience
        interval = self.settings.trace_flush_ms / 1000
        last_flush = -math.inf
        while True:
            assert self._wake is not None
            await self._wake.wait()
            # Pacing, not synchronisation: what arrives meanwhile joins this flush.
            await anyio.sleep(max(0.0, last_flush + interval - anyio.current_time()))
            self._wake = anyio.Event()
            last_flush = anyio.current_time()
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
        """Write ``entries``, adding each job to ``written`` once its entries are stored."""
        writes = await self._group(store, entries)
        await self._skip_refused_without_trace(store, writes)
        instance = self.gateway.instance_id
        for start in range(0, len(writes), JOBS_PER_PIPELINE):
            chunk = writes[start : start + JOBS_PER_PIPELINE]
            async with store.client.pipeline(transaction=False) as pipe:
                for write in chunk:
                    self._queue_write(pipe, store, write, instance)
                await pipe.execute()
            written.update(write.job for write in chunk)

    async def _group(self, store: Store, entries: list[TraceEntry]) -> list[_JobWrite]:
        """The entries by job, in order (a job's scope looked up when no entry names it)."""
        scopes = {entry.job: entry.scope for entry in entries if entry.scope is not None}
        unknown = {entry.job for entry in entries if entry.job not in scopes}
        if unknown:
            scopes |= await self._look_up_scopes(store, unknown)
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

    async def _look_up_scopes(self, store: Store, jobs: Iterable[str]) -> dict[str, str]:
        """The scopes of jobs no entry of the flush names one for: one round trip for all."""
        ordered = list(jobs)
        async with store.client.pipeline(transaction=False) as pipe:
            for job in ordered:
                pipe.hget(job_scopes_key(store), job)
            found = await pipe.execute()
        return {
            job: str(scope) for job, scope in zip(ordered, found, strict=True) if scope is not None
        }

    async def _skip_refused_without_trace(self, store: Store, writes: list[_JobWrite]) -> None:
        """Drop the writes of refused calls about jobs with no trace (a call may name a job
        the station does not hold): one round trip for all, and none in the common case."""
        doubtful = [write for write in writes if write.only_refused]
        if not doubtful:
            return
        async with store.client.pipeline(transaction=False) as pipe:
            for write in doubtful:
                pipe.exists(trace_key(store, write.scope, write.job))
            exists = await pipe.execute()
        missing = {id(write) for write, found in zip(doubtful, exists, strict=True) if not found}
        writes[:] = [write for write in writes if id(write) not in missing]

    def _queue_write(self, pipe: Any, store: Store, write: _JobWrite, instance: str) -> None:
        key = trace_key(store, write.scope, write.job)
        if write.starts_job:
            pipe.delete(key)
            pipe.hset(job_scopes_key(store), write.job, write.scope)
        for start in range(0, len(write.entries), HAPPENINGS_PER_ENTRY):
            entries = write.entries[start : start + HAPPENINGS_PER_ENTRY]
            pipe.xadd(
                key,
                stream_record(entries, instance),
                maxlen=self.settings.trace_max_entries,
                approximate=False,
            )
        if any(entry.ends_job for entry in write.entries):
            pipe.expire(key, self.settings.trace_kept_seconds)  # cleared or cancelled: it goes
            pipe.hdel(job_scopes_key(store), write.job)
