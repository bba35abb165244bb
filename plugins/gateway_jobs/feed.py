"""Status events of some scopes, read from their change streams (``gateway.jobmethods``).

Every stored transition has a record on its scope's change stream, written by whichever
instance made it, so a reader on any instance sees them all, in order. A record carries the job
order when it is new or changed and the Job Response once it is final; what it does not carry
is read from the job's documents (one MGET), and the last documents of each job are kept so
the event of a job that left the station (Clear, Cancel: its documents are deleted) still
names its order and final response. ``ResultUpdate`` records change no state and give no event,
as on MQTT.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from gateway.changes import ChangeRecord, ChangeRecordError, ReadPace
from gateway.jobmethods import JobStatus
from gateway.store import Store
from gateway_jobs.model import to_json
from gateway_jobs.repository import JobRepository
from gateway_jobs.states import state_list

log = logging.getLogger(__name__)

BLOCK_MS = 1000
READ_COUNT = 200
RETRY_SECONDS = (0.1, 0.5, 1.0, 2.0)

Entry = tuple[str, dict[str, str]]


@dataclass
class _Known:
    """The last documents seen of one job."""

    job_order: Mapping[str, Any]
    job_response: Mapping[str, Any]


@dataclass
class StreamFeed:
    """``gateway.jobmethods.StatusFeed`` over a receive stream filled by ``ChangeReader``."""

    receive: ObjectReceiveStream[JobStatus]

    def __aiter__(self) -> AsyncIterator[JobStatus]:
        return self.receive.__aiter__()


@dataclass
class ChangeReader:
    """Reads the change streams of ``scopes`` from the ids they had when it was made."""

    store: Store
    repository: JobRepository
    scopes: Sequence[str]
    cursors: dict[str, str] = field(default_factory=dict)  # stream key -> last id read
    known: dict[tuple[str, str], _Known] = field(default_factory=dict)
    # False: the records' own documents only, nothing read or kept (a follower of states)
    documents: bool = True
    pace: ReadPace = field(default_factory=lambda: ReadPace(0.0))  # 0: a read per wake

    async def mark(self) -> None:
        """Remember where each stream ends now: events start after that."""
        for scope in self.scopes:
            key = self.store.keys.changes(scope)
            last = cast(list[Entry], await self.store.client.xrevrange(key, count=1))
            self.cursors[key] = last[0][0] if last else "0-0"

    async def run(self, send: ObjectSendStream[JobStatus]) -> None:
        failures = 0
        async with send:
            while True:
                try:
                    await self.pace.wait()
                    # Scopes in any slots: the store reads them the way the deployment allows.
                    reply = await self.store.read_streams(
                        self.cursors, count=READ_COUNT, block_ms=BLOCK_MS
                    )
                except Exception as error:  # the store is away: try again, keep the cursors
                    delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                    failures += 1
                    log.warning("status events: reading the change streams failed: %s", error)
                    await anyio.sleep(delay)
                    continue
                failures = 0
                batches = cast(list[tuple[str, list[Entry]]], reply or [])
                self.pace.read(max((len(entries) for _, entries in batches), default=0), READ_COUNT)
                for stream, entries in batches:
                    for entry_id, fields in entries:
                        status = await self._status(entry_id, fields)
                        self.cursors[stream] = entry_id
                        if status is not None:
                            await send.send(status)

    async def _status(self, entry_id: str, fields: Mapping[str, str]) -> JobStatus | None:
        try:
            record = ChangeRecord.parse(entry_id, fields)
        except ChangeRecordError as error:
            log.error("status events: change record %s skipped: %s", entry_id, error)
            return None
        if not record.trigger.changes_state:
            return None
        scope, job_order_id, state = record.scope, record.job_order_id, record.state
        try:
            known = await self._documents(record)
        except Exception as error:  # one unreadable job must not stop the events of all others
            log.error("status event of job %s/%s skipped: %s", scope, job_order_id, error)
            return None
        job_state = to_json(state_list(state))
        if record.removes_job:
            self.known.pop((scope, job_order_id), None)
        # A job that left has no current response: its last one (final, or as it was cancelled).
        response = (
            known.job_response
            if record.removes_job
            else {**known.job_response, "JobState": job_state}
        )
        return JobStatus(
            scope=scope,
            job_order_id=job_order_id,
            method=record.trigger,
            state=state,
            job_order=known.job_order,
            job_state=job_state,
            job_response=response,
        )

    async def _documents(self, record: ChangeRecord) -> _Known:
        """The job's documents as of this record: the record's own, else stored, else last seen."""
        scope, job_order_id = record.scope, record.job_order_id
        order = _parsed(record.job_order)
        response = _parsed(record.job_response)
        if not self.documents:
            return _Known(
                order or {"JobOrderID": job_order_id},
                response or {"JobResponseID": job_order_id, "JobOrderID": job_order_id},
            )
        known = self.known.get((scope, job_order_id))
        if (order is None or response is None) and not record.removes_job:
            stored = await self.repository.load(scope, job_order_id)
            if stored is not None:
                order = order or to_json(stored.job_order)
                response = response or to_json(stored.response)
        if order is None:
            order = known.job_order if known else {"JobOrderID": job_order_id}
        if response is None:
            response = (
                known.job_response
                if known
                else {"JobResponseID": job_order_id, "JobOrderID": job_order_id}
            )
        known = _Known(order, response)
        self.known[(scope, job_order_id)] = known
        return known


def _parsed(text: str | None) -> Mapping[str, Any] | None:
    if not text:
        return None
    value = json.loads(text)
    return value if isinstance(value, Mapping) else None


@asynccontextmanager
async def status_feed(
    store: Store,
    repository: JobRepository,
    scopes: Sequence[str],
    *,
    documents: bool = True,
    pace: ReadPace | None = None,
) -> AsyncIterator[StreamFeed]:
    """The status events of ``scopes`` while the block runs (see ``gateway.jobmethods``);
    ``pace``: how often the streams are read while changes keep coming (default: per wake)."""
    reader = ChangeReader(
        store,
        repository,
        list(dict.fromkeys(scopes)),
        documents=documents,
        pace=pace or ReadPace(0.0),
    )
    await reader.mark()
    send, receive = anyio.create_memory_object_stream[JobStatus](max_buffer_size=READ_COUNT)
    async with anyio.create_task_group() as tasks, receive:
        tasks.start_soon(reader.run, send)
        try:
            yield StreamFeed(receive)
        finally:
            tasks.cancel_scope.cancel()
