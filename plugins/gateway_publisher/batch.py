"""What a run of change records does to one scope, worked out before anything is applied.

A batch collects the retained topics to publish (the last content per topic wins: a retained
topic only ever shows its latest message) and the index entries that change. The changes are
applied to the in-memory index only to render it, and reverted if publishing or committing
fails, so a failure anywhere leaves the publisher at its last committed state, ready to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from gateway.changes import ChangeRecord, ChangeRecordError
from gateway_publisher.documents import Payloads
from gateway_publisher.index import IndexEntry, JobIndex

log = logging.getLogger(__name__)

TopicKind = Literal["order", "result"]


@dataclass
class Batch:
    """The topics and index changes of records up to ``last_id``, over the ``base`` index."""

    scope: str
    base: JobIndex
    last_id: str | None = None
    changes: dict[str, IndexEntry | None] = field(default_factory=dict)
    previous: dict[str, IndexEntry | None] = field(default_factory=dict)  # for ``revert``
    topics: dict[tuple[TopicKind, str], bytes | None] = field(default_factory=dict)
    skipped: int = 0

    def current(self, job_order_id: str) -> IndexEntry | None:
        """The job's entry with this batch's changes so far."""
        if job_order_id in self.changes:
            return self.changes[job_order_id]
        return self.base.get(job_order_id)

    def change(self, job_order_id: str, entry: IndexEntry | None) -> None:
        if job_order_id not in self.previous:
            self.previous[job_order_id] = self.base.get(job_order_id)
        self.changes[job_order_id] = entry

    @property
    def index_changed(self) -> bool:
        return any(entry != self.previous[job_id] for job_id, entry in self.changes.items())

    def apply(self) -> None:
        """Make the changes in the base index (before the index is rendered); the changed
        entries then carry the page they were placed on, which the commit stores."""
        self.changes.update(_set(self.base, self.changes))

    def revert(self) -> None:
        """Undo ``apply`` (the batch was not published or not committed)."""
        _set(self.base, self.previous)


def _set(index: JobIndex, entries: Mapping[str, IndexEntry | None]) -> dict[str, IndexEntry | None]:
    placed: dict[str, IndexEntry | None] = {}
    for job_order_id, entry in entries.items():
        if entry is None:
            index.remove(job_order_id)
            placed[job_order_id] = None
        else:
            placed[job_order_id] = index.put(entry)
    return placed


async def plan(
    scope: str,
    base: JobIndex,
    entries: Iterable[tuple[str, Mapping[str, str]]],
    payloads: Payloads,
) -> Batch:
    """The batch of ``entries`` (stream id, fields), oldest first."""
    batch = Batch(scope, base)
    for entry_id, fields in entries:
        batch.last_id = entry_id
        try:
            record = ChangeRecord.parse(entry_id, fields)
        except ChangeRecordError as error:
            # Retrying cannot fix a malformed record; it must not block the stream either.
            log.error("change record %s of scope %s skipped: %s", entry_id, scope, error)
            batch.skipped += 1
            continue
        await _apply(batch, record, payloads)
    return batch


async def _apply(batch: Batch, record: ChangeRecord, payloads: Payloads) -> None:
    job_id = record.job_order_id
    if record.removes_job:  # Clear or Cancel: zero-byte retained deletes, out of the index
        batch.topics[("order", job_id)] = None
        batch.topics[("result", job_id)] = None
        batch.change(job_id, None)
        return
    if record.trigger.sets_order:
        order = await payloads.order(batch.scope, record)
        if order is not None:
            batch.topics[("order", job_id)] = order
    before = batch.current(job_id)
    has_result = False
    if record.has_result:  # every write in Ended / Aborted republishes the final response
        result = await payloads.result(batch.scope, record)
        if result is not None:
            batch.topics[("result", job_id)] = result
        has_result = result is not None or (before is not None and before.has_result)
    batch.change(job_id, IndexEntry(job_id, record.state, record.priority, has_result))
