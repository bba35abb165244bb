"""The per-job trace: what happened to a job, in order, kept with the job in Redis.

Observer hooks (``TraceObserver``) turn each happening into a ``TraceEntry``: the job changed
state, a step was entered or left, an MES method or an operator request was answered, a
command went to equipment, a reply or an event came back. Hooks must not block, so entries
queue in memory and ``TraceWriter`` (a service) appends them to the job's stream::

    {p}:{scope}:trace:{job}           STREAM  one entry per happening, at most ui.trace_max_entries
    {p}:{_global}:trace:job-scopes    HASH    job -> scope, for replies that do not name theirs

The stream's ids order the trace and are the cursors a browser resumes from. A job that is
cleared or cancelled keeps its trace for ``ui.trace_kept_seconds``. Entries come from every
instance (each records what it did), so two instances' entries about one job may interleave a
few milliseconds out of order; each carries its own time (``ts``) and instance. An instance
that crashes loses what it had not written yet; a trace is for people, not for recovery.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import TaskStatus

from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState
from gateway.resilience import is_transient
from gateway_ui.settings import UiSettings

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.phases import ServicePhase
    from gateway.store import Store

log = logging.getLogger(__name__)

MAX_DATA_CHARS = 2000  # replies and events: their data, cut to this much JSON


class TraceKind(StrEnum):
    STATE = "state"  # the job changed state (method, previous, current)
    STEP = "step"  # a step or branch was entered (active) or left
    METHOD = "method"  # an MES method or operator request was answered (status, requested_by)
    COMMAND = "command"  # a command went to equipment (correlation_id, type, equipment, error)
    REPLY = "reply"  # equipment answered a command (correlation_id, error, data)
    EVENT = "event"  # equipment reported an event (type, event_id, equipment, data)


@dataclass(frozen=True)
class TraceEntry:
    kind: TraceKind
    job: str
    scope: str | None  # None: to be looked up (a reply that does not name its scope)
    fields: Mapping[str, Any]
    ts: float = field(default_factory=time.time)

    @property
    def refused(self) -> bool:
        """A method call that changed nothing (it may name a job that does not exist)."""
        return self.kind is TraceKind.METHOD and self.fields.get("status") != "NO_ERROR"

    def record(self, instance: str) -> dict[str, str]:
        """The stream entry: kind, time, instance and the fields as JSON."""
        return {
            "kind": str(self.kind),
            "ts": repr(self.ts),
            "instance": instance,
            "fields": json.dumps(self.fields, default=str, separators=(",", ":")),
        }


def trace_key(store: Store, scope: str, job: str) -> str:
    return store.keys.scoped(scope, "trace", job)


def job_scopes_key(store: Store) -> str:
    return store.keys.global_key("trace", "job-scopes")


def read_entry(entry_id: str, record: Mapping[str, str]) -> dict[str, Any]:
    """A stream entry as the API serves it: ``id``, ``kind``, ``ts``, ``instance``, fields."""
    try:
        fields = json.loads(record.get("fields") or "{}")
    except json.JSONDecodeError:
        fields = {"unreadable": record.get("fields")}
    return {
        "id": entry_id,
        "kind": record.get("kind"),
        "ts": float(record.get("ts") or 0),
        "instance": record.get("instance"),
        **(fields if isinstance(fields, dict) else {"value": fields}),
    }


async def read_trace(store: Store, scope: str, job: str) -> list[dict[str, Any]]:
    """The job's trace, oldest first, with each reply's latency from its command."""
    raw = cast(
        list[tuple[str, dict[str, str]]], await store.client.xrange(trace_key(store, scope, job))
    )
    return with_latencies([read_entry(entry_id, record) for entry_id, record in raw])


def with_latencies(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``latency_ms`` to replies: the time since the command with its correlation id."""
    sent: dict[str, float] = {}
    for entry in entries:
        correlation = entry.get("correlation_id")
        if not isinstance(correlation, str):
            continue
        if entry["kind"] == TraceKind.COMMAND:
            sent[correlation] = entry["ts"]
        elif entry["kind"] == TraceKind.REPLY and correlation in sent:
            entry["latency_ms"] = round((entry["ts"] - sent[correlation]) * 1000, 1)
    return entries


def _data(value: Any) -> Any:
    text = json.dumps(value, default=str)
    return value if len(text) <= MAX_DATA_CHARS else text[:MAX_DATA_CHARS] + "…"


def _job_of(correlation_id: str) -> str | None:
    """The job of a ``{job}:{action}:{attempt}`` correlation id (``None``: not one of ours)."""
    parts = correlation_id.rsplit(":", 2)
    return parts[0] if len(parts) == 3 and parts[2].isdigit() else None


class TraceWriter:
    """Queues entries from the hooks and appends them to the jobs' streams (a service)."""

    name = "ui-trace"
    roles = frozenset({"gateway", "engine"})  # where jobs change and equipment is commanded

    def __init__(self, settings: UiSettings, gateway: ServicePhase) -> None:
        self.settings = settings
        self.gateway = gateway
        self.queue: deque[TraceEntry] = deque(maxlen=settings.trace_buffer)
        self.dropped = 0
        self.written = 0
        self._wake: anyio.Event | None = None
        self._scopes: dict[str, str] = {}  # job -> scope, learned from the hooks

    def add(self, entry: TraceEntry) -> None:
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1  # the oldest goes; said in the log when Redis is back
        self.queue.append(entry)
        if entry.scope is not None:
            self._scopes[entry.job] = entry.scope
            if len(self._scopes) > 10000:
                self._scopes.pop(next(iter(self._scopes)))
        if self._wake is not None:
            self._wake.set()

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self._wake = anyio.Event()
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._write_loop, gateway.stopping)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()
        with anyio.move_on_after(2, shield=True):  # what the last moments recorded
            try:
                await self.flush()
            except Exception as error:  # the store away at the end: the entries are lost
                log.warning("job trace: %d entries not written: %s", len(self.queue), error)

    async def _write_loop(self, stopping: anyio.Event) -> None:
        """Write what is queued whenever something is; a store outage is retried (logged once,
        the readiness check ``ui.trace`` failing meanwhile) while the queue keeps the newest
        ``trace_buffer`` entries."""
        resilience = self.gateway.resilience
        while True:
            assert self._wake is not None
            await self._wake.wait()
            self._wake = anyio.Event()
            try:
                await resilience.retry("ui.trace", self.flush, stop=stopping, logger=log)
            except Exception as error:
                if is_transient(error):
                    return  # stopping: ``run`` makes a last attempt
                log.exception("job trace: %d entries not written", len(self.queue))
                self.queue.clear()  # they would fail again

    async def flush(self) -> None:
        """Write every queued entry; an entry stays queued until Redis took it."""
        store = self.gateway.store
        if store is None:
            self.queue.clear()
            return
        while self.queue:
            batch = list(self.queue)[:200]
            async with store.client.pipeline(transaction=False) as pipe:
                for entry in batch:
                    scope = entry.scope or await self._scope_of(store, entry.job)
                    if scope is None:
                        log.debug("trace entry for unknown job %s dropped", entry.job)
                        continue
                    if entry.refused and not await store.client.exists(
                        trace_key(store, scope, entry.job)
                    ):
                        continue  # a refused call about a job the station does not hold
                    self._queue_write(pipe, store, scope, entry)
                await pipe.execute()
            for _ in batch:
                self.queue.popleft()
            self.written += len(batch)
        if self.dropped:
            log.warning("job trace: %d entries were dropped while Redis was away", self.dropped)
            self.dropped = 0

    def _queue_write(self, pipe: Any, store: Store, scope: str, entry: TraceEntry) -> None:
        key = trace_key(store, scope, entry.job)
        new_job = entry.kind is TraceKind.STATE and entry.fields.get("previous") == JobState.INITIAL
        if new_job:  # a job id used again starts a fresh trace
            pipe.delete(key)
            pipe.hset(job_scopes_key(store), entry.job, scope)
        pipe.xadd(
            key,
            entry.record(self.gateway.instance_id),
            maxlen=self.settings.trace_max_entries,
            approximate=False,
        )
        if entry.kind is TraceKind.STATE and entry.fields.get("current") == JobState.END:
            pipe.expire(key, self.settings.trace_kept_seconds)  # cleared or cancelled: it goes
            pipe.hdel(job_scopes_key(store), entry.job)

    async def _scope_of(self, store: Store, job: str) -> str | None:
        scope = self._scopes.get(job)
        if scope is None:
            found = await store.client.hget(job_scopes_key(store), job)
            scope = str(found) if found is not None else None
            if scope is not None:
                self._scopes[job] = scope
        return scope


class TraceObserver:
    """The observer hooks of one gateway, feeding its ``TraceWriter`` (registered per gateway,
    because the hooks do not say which gateway they are about)."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer

    @hookimpl
    def gateway_job_state_changed(
        self, scope: str, job_order_id: str, method: str, previous: JobState, current: JobState
    ) -> None:
        fields = {"method": method, "previous": previous.value, "current": current.value}
        self.writer.add(TraceEntry(TraceKind.STATE, job_order_id, scope, fields))

    @hookimpl
    def gateway_step_changed(self, scope: str, job_order_id: str, step: str, active: bool) -> None:
        fields = {"step": step, "active": active}
        self.writer.add(TraceEntry(TraceKind.STEP, job_order_id, scope, fields))

    @hookimpl
    def gateway_job_method_called(
        self,
        scope: str,
        job_order_id: str,
        method: str,
        status: str,
        message: str | None,
        requested_by: str,
    ) -> None:
        fields = {"method": method, "status": status, "requested_by": requested_by}
        if message:
            fields["message"] = message
        self.writer.add(TraceEntry(TraceKind.METHOD, job_order_id, scope, fields))

    @hookimpl
    def gateway_equipment_command_sent(self, command: EquipmentCommand, error: str | None) -> None:
        fields = {
            "correlation_id": command.correlation_id,
            "action": command.action,
            "type": command.type,
            "equipment": command.equipment,
            "error": error,
        }
        entry = TraceEntry(TraceKind.COMMAND, command.job_order_id, command.scope, fields)
        self.writer.add(entry)

    @hookimpl
    def gateway_equipment_replied(self, reply: EquipmentReply) -> None:
        job = _job_of(reply.correlation_id)
        if job is None:
            return
        fields = {"correlation_id": reply.correlation_id, "error": reply.error}
        fields["data"] = _data(reply.data)
        self.writer.add(TraceEntry(TraceKind.REPLY, job, reply.scope, fields))

    @hookimpl
    def gateway_equipment_event_received(self, event: EquipmentEvent) -> None:
        if event.job_order_id is None:
            return  # which job takes it is the engine's choice; its steps show the effect
        fields = {"type": event.type, "event_id": event.id, "equipment": event.equipment}
        fields["data"] = _data(event.data)
        self.writer.add(TraceEntry(TraceKind.EVENT, event.job_order_id, event.scope, fields))
