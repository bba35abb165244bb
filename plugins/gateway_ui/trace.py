"""The per-job trace: what happened to a job, in order, kept with the job in Redis.

Observer hooks (``TraceObserver``) turn each happening into a ``TraceEntry``: the job changed
state, a step was entered or left, an MES method or an operator request was answered, a
command went to equipment, a reply or an event came back. Hooks must not block, so entries
queue in memory and ``TraceWriter`` (a service, ``gateway_ui.trace_writer``) appends them to
the job's stream, ``ui.trace_flush_ms`` after they came, one script call per scope::

    {p}:{scope}:trace:{job}       STREAM  at most one entry per job and flush

(a reply that does not name its scope goes to the known scope holding its job's trace).

A stream entry holds one happening (``kind``, ``ts``, ``instance``, ``fields`` as JSON) or, when
one flush had several for the job, all of them (``kind=batch``, ``instance``, ``entries``: a
JSON list of ``{"kind", "ts", "fields"}``), so a step costs Redis one XADD per job and flush
rather than one per happening. Readers expand a batch into its happenings (``happenings``).

Each happening has an id: the stream id of its entry, or ``<stream id>/<n>`` for the n-th
(from 0) of a batch. Ids order the trace, and are the cursors a browser resumes from: after
``X/n`` come the happenings of ``X`` after the n-th, then the entries after ``X``; after a
plain ``X``, the entries after ``X`` (``position`` compares them).

A job that is cleared or cancelled keeps its trace for ``ui.trace_kept_seconds``. Entries come
from every instance (each records what it did), so two instances' entries about one job may
interleave a flush interval out of order; each carries its own time (``ts``) and instance. An
instance that crashes loses what it had not written yet; a trace is for people, not for
recovery.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

from gateway.equipment import CorrelationId, EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState

if TYPE_CHECKING:
    from gateway.store import Store
    from gateway_ui.trace_writer import TraceWriter

MAX_DATA_CHARS = 2000  # replies and events: their data, cut to this much JSON
BATCH = "batch"  # the kind of a stream entry holding several happenings
WHOLE_ENTRY = 1 << 62  # the position of a plain stream id: after every happening of its entry


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

    @property
    def starts_job(self) -> bool:
        """The job was just stored: a job id used again starts a fresh trace."""
        return self.kind is TraceKind.STATE and self.fields.get("previous") == JobState.INITIAL

    @property
    def ends_job(self) -> bool:
        """The job was cleared or cancelled: its trace goes after ``trace_kept_seconds``."""
        return self.kind is TraceKind.STATE and self.fields.get("current") == JobState.END


def stream_record(entries: list[TraceEntry], instance: str) -> dict[str, str]:
    """The stream entry holding ``entries`` (one happening: its own format, else a batch)."""
    if len(entries) == 1:
        entry = entries[0]
        return {
            "kind": str(entry.kind),
            "ts": repr(entry.ts),
            "instance": instance,
            "fields": _json(entry.fields),
        }
    happenings = [{"kind": str(e.kind), "ts": e.ts, "fields": e.fields} for e in entries]
    return {
        "kind": BATCH,
        "ts": repr(entries[-1].ts),
        "instance": instance,
        "entries": _json(happenings),
    }


def _json(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def trace_key(store: Store, scope: str, job: str) -> str:
    return store.keys.scoped(scope, "trace", job)


def happenings(stream_id: str, record: Mapping[str, str]) -> list[dict[str, Any]]:
    """A stream entry as the API serves it: its happenings, each with ``id``, ``kind``,
    ``ts``, ``instance`` and its fields (several for a batch, ids ``<stream id>/<n>``)."""
    instance = record.get("instance")
    if record.get("kind") != BATCH:
        fields = _loads(record.get("fields") or "{}")
        return [_happening(stream_id, record.get("kind"), record.get("ts"), instance, fields)]
    items = _loads(record.get("entries") or "[]")
    if not isinstance(items, list):
        return [_happening(stream_id, BATCH, record.get("ts"), instance, items)]
    return [
        _happening(
            f"{stream_id}/{number}",
            item.get("kind"),
            item.get("ts"),
            item.get("instance", instance),
            item.get("fields"),
        )
        if isinstance(item, dict)
        else _happening(f"{stream_id}/{number}", None, 0, instance, item)
        for number, item in enumerate(items)
    ]


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"unreadable": text}


def _happening(happening_id: str, kind: Any, ts: Any, instance: Any, fields: Any) -> dict[str, Any]:
    return {
        "id": happening_id,
        "kind": kind,
        "ts": float(ts or 0),
        "instance": instance,
        **(fields if isinstance(fields, dict) else {"value": fields}),
    }


def position(happening_id: str) -> tuple[int, int, int]:
    """Where a happening id (or a trace cursor) is in the trace, for comparing: a plain stream
    id stands after every happening of its entry, ``X/n`` after the n-th of ``X``."""
    stream_id, slash, number = happening_id.partition("/")
    millis, _, sequence = stream_id.partition("-")
    return int(millis), int(sequence or 0), int(number) if slash else WHOLE_ENTRY


def is_happening_id(text: str) -> bool:
    """``<millis>-<sequence>`` or ``<millis>-<sequence>/<n>``."""
    stream_id, slash, number = text.partition("/")
    millis, dash, sequence = stream_id.partition("-")
    well_formed = bool(dash) and millis.isdigit() and sequence.isdigit()
    return well_formed and (not slash or number.isdigit())


def read_from(cursor: str) -> str:
    """The stream id to read a trace after (XREAD), to go on after the happening ``cursor``:
    for ``X/n`` the id just before ``X`` (its remaining happenings are still to come)."""
    stream_id, slash, _ = cursor.partition("/")
    if not slash:
        return stream_id
    millis, sequence, _ = position(stream_id)
    if sequence > 0:
        return f"{millis}-{sequence - 1}"
    return f"{millis - 1}-{(1 << 64) - 1}" if millis > 0 else "0-0"


async def read_trace(store: Store, scope: str, job: str) -> list[dict[str, Any]]:
    """The job's trace, oldest first, with each reply's latency from its command."""
    raw = cast(
        list[tuple[str, dict[str, str]]], await store.client.xrange(trace_key(store, scope, job))
    )
    return with_latencies([h for stream_id, record in raw for h in happenings(stream_id, record)])


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
    """The job of a correlation id (``None``: not one of ours)."""
    try:
        return CorrelationId.parse(correlation_id).job
    except ValueError:
        return None


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
