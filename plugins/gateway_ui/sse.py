"""Server-Sent Events fed from Redis streams, resumable from the browser's Last-Event-ID.

A job page follows two streams: the scope's change stream (every state change job management
stores, see ``gateway.store``) and the job's trace (``gateway_ui.trace``). Each event's id is
where it has read up to, ``<changes id>,<trace id>``: a stream id of the change stream and the
id of the last trace happening sent (a stream id, or ``<stream id>/<n>`` inside an entry that
holds several). A browser that loses the connection sends the last one back (``Last-Event-ID``)
and the stream goes on from exactly there, on whichever instance it reaches, with neither
duplicates nor gaps: the cursor is all the state there is.

Events: ``state`` (a change record of the job), ``trace`` (a trace entry), and after each batch
``live`` (the job's state, progress and response now, without an id: it describes the present,
not a position in a stream). A scope page follows the change stream alone (``change`` events).

Pages read the streams through ``gateway_ui.live.LiveFeed``: one reader for all of them, so
open pages hold no connection of the store's pool.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gateway.changes import ChangeRecord, ChangeRecordError
from gateway.store import Store
from gateway_ui.live import LiveFeed
from gateway_ui.trace import happenings, is_happening_id, position, read_from, trace_key
from gateway_ui.views import UiData

log = logging.getLogger(__name__)

RETRY_MS = 1000  # how soon a browser reconnects
START = "0-0"


def format_event(event: str | None, data: Any, event_id: str | None = None) -> str:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, default=str, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


def parse_cursor(text: str | None, parts: int, *, trace_last: bool = False) -> list[str] | None:
    """The ids of a cursor (``None``: absent or not one of ours): stream ids, the last one a
    trace happening's id when ``trace_last``."""
    if not text:
        return None
    ids = text.split(",")
    if len(ids) != parts or not all(_is_stream_id(value) for value in ids[:-1]):
        return None
    last_ok = is_happening_id(ids[-1]) if trace_last else _is_stream_id(ids[-1])
    return ids if last_ok else None


def _is_stream_id(value: str) -> bool:
    millis, dash, sequence = value.partition("-")
    return bool(dash) and millis.isdigit() and sequence.isdigit()


async def last_id(store: Store, key: str) -> str:
    """The id of the newest entry of a stream, ``0-0`` when it has none."""
    newest = cast(list[tuple[str, Any]], await store.client.xrevrange(key, count=1))
    return newest[0][0] if newest else START


@dataclass
class JobStream:
    """The events of one job page, from a cursor on."""

    data: UiData
    store: Store
    scope: str
    job: str
    feed: LiveFeed

    @property
    def keys(self) -> tuple[str, str]:
        return self.store.keys.changes(self.scope), trace_key(self.store, self.scope, self.job)

    async def cursor_now(self) -> str:
        changes, trace = self.keys
        return f"{await last_id(self.store, changes)},{await last_id(self.store, trace)}"

    async def events(self, cursor: Sequence[str]) -> AsyncGenerator[str]:
        """``cursor``: a change stream id and a trace happening id, sent already."""
        changes_key, trace_key_ = self.keys
        sent = cursor[1]  # the last trace happening the browser has
        after = position(sent)
        positions = {changes_key: cursor[0], trace_key_: read_from(sent)}
        yield f"retry: {RETRY_MS}\n\n"
        yield format_event("live", await self.data.live(self.scope, self.job))
        async for batch in self.feed.follow(dict(positions)):
            if batch is None:
                yield ": waiting\n\n"
                continue
            for stream, entries in batch:
                for entry_id, fields in entries:
                    positions[stream] = entry_id
                    if stream == changes_key:
                        change = _change(entry_id, fields)
                        if change is not None and change["job_order_id"] == self.job:
                            yield format_event("state", change, f"{entry_id},{sent}")
                        continue
                    for happening in happenings(entry_id, fields):
                        if position(happening["id"]) <= after:
                            continue  # sent before the browser came back (the same entry)
                        sent = happening["id"]
                        cursor_text = f"{positions[changes_key]},{sent}"
                        yield format_event("trace", happening, cursor_text)
            yield format_event("live", await self.data.live(self.scope, self.job))


@dataclass
class ScopeStream:
    """The events of one scope page: its change records."""

    store: Store
    scope: str
    feed: LiveFeed

    async def cursor_now(self) -> str:
        return await last_id(self.store, self.store.keys.changes(self.scope))

    async def events(self, cursor: Sequence[str]) -> AsyncGenerator[str]:
        key = self.store.keys.changes(self.scope)
        positions = {key: cursor[0]}
        yield f"retry: {RETRY_MS}\n\n"
        async for batch in self.feed.follow(positions):
            if batch is None:
                yield ": waiting\n\n"
                continue
            for _, entries in batch:
                for entry_id, fields in entries:
                    positions[key] = entry_id
                    change = _change(entry_id, fields)
                    if change is not None:
                        yield format_event("change", change, entry_id)


def _change(entry_id: str, fields: Mapping[str, str]) -> dict[str, Any] | None:
    """What a page shows of a change record (not the documents it may carry); ``None`` for an
    entry that is no change record (logged: the stream goes on)."""
    try:
        record = ChangeRecord.parse(entry_id, fields)
    except ChangeRecordError as error:
        log.warning("change record %s skipped: %s", entry_id, error)
        return None
    return {
        "id": entry_id,
        "change_type": record.trigger,
        "job_order_id": record.job_order_id,
        "state": record.state,
        "previous": record.previous,
        "priority": record.priority,
        "has_result": record.has_result,
        "ts": record.written_at,
    }
