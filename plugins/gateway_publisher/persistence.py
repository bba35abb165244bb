"""The publisher's own state in the store: per scope a cursor, a sequence counter and the index.

Keys, all in the scope's hash slot (so one MULTI covers them on Redis Cluster too)::

    {p}:{scope}:publisher:cursor   STRING  id of the last change record applied
    {p}:{scope}:publisher:index    HASH    job order id -> index entry, as of the cursor
    {p}:{scope}:publisher:seq      STRING  last state-index sequence number handed out

The cursor and the index change together in one transaction, so after any crash the stored
index is exactly the result of the records up to the stored cursor: a restart resumes there,
skipping nothing and applying nothing twice. ``seq`` is incremented on its own, *before* each
index is published, so a number is never handed out twice, not even by a publisher that died
between publishing and committing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from gateway.store import Store
from gateway_publisher.batch import Batch
from gateway_publisher.index import IndexEntry, JobIndex

START = "0-0"  # a stream id before every entry


@dataclass
class ScopeState:
    """A scope as the publisher holds it: where it is in the stream and what it published."""

    scope: str
    cursor: str = START
    seq: int = 0
    index: JobIndex = field(default_factory=JobIndex)
    stored: bool = False  # the publisher committed this scope before (not a new scope)

    def committed(self, batch: Batch) -> None:
        """Move past the batch, once it is published and committed."""
        if batch.last_id is not None:
            self.cursor = batch.last_id
            self.stored = True


class PublisherStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def key(self, scope: str, name: str) -> str:
        return self.store.keys.scoped(scope, "publisher", name)

    async def load(self, scope: str) -> ScopeState:
        """The scope's committed state: three reads in one MULTI, a consistent snapshot."""
        async with self.store.client.pipeline(transaction=True) as pipeline:
            pipeline.get(self.key(scope, "cursor"))
            pipeline.get(self.key(scope, "seq"))
            pipeline.hgetall(self.key(scope, "index"))
            cursor, seq, stored = await pipeline.execute()
        entries = cast(dict[str, str], stored)  # decode_responses: text
        index = JobIndex(
            {job_id: IndexEntry.from_stored(job_id, text) for job_id, text in entries.items()}
        )
        return ScopeState(scope, cursor or START, int(seq or 0), index, stored=cursor is not None)

    async def next_seq(self, scope: str) -> int:
        """Hand out the scope's next sequence number (persisted before it is published)."""
        return int(await self.store.client.incr(self.key(scope, "seq")))

    async def commit(self, batch: Batch) -> None:
        """The batch's index changes and its last record id, atomically."""
        if batch.last_id is None:
            return
        index_key = self.key(batch.scope, "index")
        async with self.store.transaction(batch.scope) as transaction:
            pipeline = transaction.pipeline
            stored = {job: entry.stored() for job, entry in batch.changes.items() if entry}
            removed = [job for job, entry in batch.changes.items() if entry is None]
            if stored:
                pipeline.hset(index_key, mapping=stored)  # type: ignore[arg-type]
            if removed:
                pipeline.hdel(index_key, *removed)
            pipeline.set(self.key(batch.scope, "cursor"), batch.last_id)
