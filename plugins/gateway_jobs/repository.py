"""Jobs in the store: documents, indexes, and the compare-and-swap every state change goes through.

The documents are ``gateway_jobs.stored.StoredJob``. Keys, all in the scope's hash slot
(``store.keys.scoped``)::

    {p}:{scope}:job:{id}               JSON    ISA95JobOrderAndStateDataType + Work Master snapshot
    {p}:{scope}:jobresponse:{id}       JSON    ISA95JobResponseDataType (JobState kept current)
    {p}:{scope}:jobs:by-priority       ZSET    every job the scope holds, score -Priority
    {p}:{scope}:jobs:state:{top}       SET     the jobs in each top-level state
    {p}:{scope}:changes                STREAM  the store's change stream (read by the publisher)
    {p}:{scope}:queue:...                      the AllowedToStart queue and the equipment
                                               running jobs hold (``queue``), kept in the same
                                               transaction as the state

A state change is optimistic: take the job's two documents, decide with the state table, then
write documents, indexes and one change record in one guarded commit (``store.transaction``:
one script call that writes only if the documents are still the ones decided on). If another
instance changed the job meanwhile, the commit fails, and the change is decided again on what
is stored now, so two instances never apply conflicting transitions and a state never goes
without its change record. A Store in a scope with a job limit commits only while the scope
holds fewer jobs than the limit (checked in the commit), so concurrent Stores cannot overshoot
it.

The documents decided on are, in the common case, not read: the repository remembers the texts
it last wrote or read of each key it watches (``_Texts``, bounded, a job's dropped when it is
deleted), and the commit's guard checks them. A remembered text another instance has changed
since fails the guard, and the change is decided again on a fresh read; so does a refusal
decided on remembered texts (it writes nothing, so no guard would have caught them). A change
thus costs one Redis command when its documents are remembered, two when they are not.

Cancelled and cleared jobs (EndState) are deleted, documents and index entries, in the
transaction that records the Cancel / Clear: they no longer count against the limit, and their
JobOrderID may be used again. The change stream keeps the record of them.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, cast

import anyio
from redis.exceptions import WatchError

from gateway.changes import ChangeRecord, Trigger
from gateway.errors import GatewayError
from gateway.jobstates import JobState, TopState
from gateway.store import DoneMarker, ScopeTransaction, Store
from gateway_jobs.model import (
    JobResponse,
    from_json,
    to_json,
)
from gateway_jobs.queue import QueueKeys, entry_json, queue_change
from gateway_jobs.states import next_state
from gateway_jobs.stored import StoredJob, required_equipment


@dataclass(frozen=True)
class Change:
    """A state change that was stored: the job before (``None`` when new) and after."""

    trigger: Trigger
    before: StoredJob | None
    after: StoredJob

    @property
    def previous_state(self) -> JobState:
        return self.before.state if self.before is not None else JobState.INITIAL


RefusalKind = Literal["unknown", "invalid-state", "duplicate", "full", "unacceptable"]


@dataclass(frozen=True)
class Refusal:
    """Why a change was not made (nothing was written)."""

    kind: RefusalKind
    state: JobState | None = None  # invalid-state: the state the job is in
    limit: int | None = None  # full: the scope's limit
    message: str = ""  # unacceptable: what the job order lacks


@dataclass(frozen=True)
class Admission:
    """A new job as its checks accepted it: what ``JobRepository.create`` stores."""

    job: StoredJob
    limit: int | None  # the scope's job limit (``None``: none)
    equipment: Collection[str] | None = None  # as for ``create``


Admit = Callable[[ScopeTransaction], Awaitable[Admission | Refusal]]
"""Decides on a new job inside its transaction (reading the watched keys it needs from it)."""


class _Refused(Exception):
    """Leaves a transaction block without committing anything."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.kind)
        self.refusal = refusal


Edit = Callable[[StoredJob], StoredJob]
"""Adjusts a job already moved to its new state (its order, its response's data)."""

Attempt = Callable[[ScopeTransaction, bool], Awaitable[Change]]
"""Decides a change in its transaction; ``True``: on what was read now (not remembered)."""

REMEMBERED_KEYS = 4096
"""At most this many documents' texts are remembered (``_Texts``): the jobs held in progress,
two documents each, and the configuration a Store checks. A job's go when it is deleted."""


@dataclass
class PendingMarker:
    """A de-duplication marker the next job change of the caller's call commits with its own
    writes (``marked``): the call's effect and the marker that makes it a duplicate are one
    commit, not two. Only the call's first change may write it; ``written`` says it did."""

    scope: str
    marker: DoneMarker
    open: bool = True
    written: bool = False


_MARKER: ContextVar[PendingMarker | None] = ContextVar("job_change_marker", default=None)


@contextmanager
def marked(scope: str, marker: DoneMarker) -> Iterator[PendingMarker]:
    """While the block runs, the first job change in ``scope`` commits ``marker`` with it."""
    pending = PendingMarker(scope, marker)
    token = _MARKER.set(pending)
    try:
        yield pending
    finally:
        _MARKER.reset(token)


def _take_marker(scope: str) -> PendingMarker | None:
    """The marker this change commits, if it is the first change of a marked call."""
    pending = _MARKER.get()
    if pending is None or not pending.open:
        return None
    pending.open = False  # a later change of the call (or of work it set off) writes none
    return pending if pending.scope == scope else None


class _Texts:
    """The texts this process last wrote or read of the keys job changes watch, least recently
    used dropped first. What it remembers may be stale (another instance wrote since): it is
    only ever decided on under a commit's guard, which then fails."""

    def __init__(self, limit: int = REMEMBERED_KEYS) -> None:
        self.limit = limit
        self._texts: OrderedDict[str, str | None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._texts)

    def known(self, keys: Iterable[str]) -> dict[str, str | None]:
        found = {}
        for key in keys:
            if key in self._texts:
                self._texts.move_to_end(key)
                found[key] = self._texts[key]
        return found

    def remember(self, texts: Mapping[str, str | None]) -> None:
        for key, text in texts.items():
            self._texts[key] = text
            self._texts.move_to_end(key)
        while len(self._texts) > self.limit:
            self._texts.popitem(last=False)

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._texts.pop(key, None)


class JobRepository:
    """Reads and compare-and-swap writes of one store's jobs."""

    def __init__(self, store: Store, *, retry_limit: int = 200) -> None:
        self.store = store
        self.retry_limit = retry_limit
        self.queue_keys = QueueKeys(store)
        self.texts = _Texts()

    # -- keys -------------------------------------------------------------------------------

    def job_key(self, scope: str, job_order_id: str) -> str:
        return self.store.keys.scoped(scope, "job", job_order_id)

    def response_key(self, scope: str, job_order_id: str) -> str:
        return self.store.keys.scoped(scope, "jobresponse", job_order_id)

    def _keys(self, scope: str, job_order_id: str) -> list[str]:
        return [self.job_key(scope, job_order_id), self.response_key(scope, job_order_id)]

    def priority_key(self, scope: str) -> str:
        return self.store.keys.scoped(scope, "jobs", "by-priority")

    def state_key(self, scope: str, top: TopState) -> str:
        return self.store.keys.scoped(scope, "jobs", "state", top.value)

    def results_due_key(self, scope: str) -> str:
        """The jobs whose recipe results are awaited (``StoredJob.results_due``), by due time."""
        return self.store.keys.scoped(scope, "jobs", "results-due")

    # -- reads ------------------------------------------------------------------------------

    async def results_overdue(self, scope: str, now: float) -> list[str]:
        """The jobs whose recipe results were due before ``now``."""
        due = await self.store.client.zrangebyscore(self.results_due_key(scope), "-inf", now)
        return sorted(str(job) for job in due)

    async def forget_results_due(self, scope: str, job_order_id: str) -> None:
        await self.store.client.zrem(self.results_due_key(scope), job_order_id)

    async def in_state(self, scope: str, top: TopState) -> list[str]:
        """The ids of the scope's jobs in the top-level state ``top``, sorted."""
        members = await self.store.client.smembers(self.state_key(scope, top))
        return sorted(str(member) for member in members)

    async def load(self, scope: str, job_order_id: str) -> StoredJob | None:
        """The job as stored now (read, never remembered: another instance may have changed
        it); what is read is remembered for the next change of the job."""
        keys = self._keys(scope, job_order_id)
        texts = cast(list[str | None], await self.store.client.mget(keys))  # decoded
        job_text, response_text = texts
        if job_text is None:
            self.texts.forget(keys)
            return None
        self.texts.remember(dict(zip(keys, texts, strict=True)))
        return StoredJob.from_documents(json.loads(job_text), _parsed(response_text))

    def remembered(self, scope: str, job_order_id: str) -> StoredJob | None:
        """The job as this process last wrote or read it, without a read: possibly stale
        (another instance may have changed it since), for what a stale job cannot harm."""
        keys = self._keys(scope, job_order_id)
        texts = self.texts.known(keys)
        job_text = texts.get(keys[0])
        if job_text is None or keys[1] not in texts:
            return None
        return StoredJob.from_documents(json.loads(job_text), _parsed(texts[keys[1]]))

    async def exists(self, scope: str, job_order_id: str) -> bool:
        return bool(await self.store.client.exists(self.job_key(scope, job_order_id)))

    async def count(self, scope: str) -> int:
        """Jobs the scope holds (everything but EndState, which is deleted)."""
        return int(await self.store.client.zcard(self.priority_key(scope)))

    async def job_order_ids(self, scope: str) -> list[str]:
        """The scope's jobs, highest Priority first (equal priorities by JobOrderID)."""
        ids = await self.store.client.zrange(self.priority_key(scope), 0, -1)
        return [str(job_id) for job_id in ids]  # decode_responses: already str

    async def responses_in_state(self, scope: str, top: TopState) -> list[JobResponse]:
        """Job Responses of the jobs in top-level state ``top``, highest Priority first."""
        members = set(await self.store.client.smembers(self.state_key(scope, top)))
        ids = [job_id for job_id in await self.job_order_ids(scope) if job_id in members]
        documents = await self._documents([self.response_key(scope, job_id) for job_id in ids])
        return [
            from_json(document, JobResponse, element="JobResponse")
            for document in documents
            if document is not None  # cleared between the two reads
        ]

    async def _documents(self, keys: list[str]) -> list[Any]:
        if not keys:
            return []
        texts = await self.store.client.mget(keys)
        return [None if text is None else json.loads(text) for text in texts]

    # -- compare-and-swap writes ------------------------------------------------------------

    async def create(
        self,
        scope: str,
        job_order_id: str,
        trigger: Trigger,
        admit: Admit,
        *,
        reads: Sequence[str] = (),
    ) -> Change | Refusal:
        """Store the new job ``admit`` decides on, unless its id is taken or the scope holds
        its limit of jobs already.

        ``reads``: the keys ``admit`` reads (the configuration it checks against), watched with
        the job's own (read in one round trip, or remembered), so a change to them makes it
        decide again. The job's keys are assumed free, the count below the limit: the commit's
        guards check both, and a failed guard decides again on what is read then."""
        job_key = self.job_key(scope, job_order_id)
        response_key = self.response_key(scope, job_order_id)
        watch = [job_key, response_key, *reads]
        count_key = self.priority_key(scope)

        async def attempt(transaction: ScopeTransaction, fresh: bool) -> Change:
            if await transaction.get_json(job_key) is not None:
                raise _Refused(Refusal("duplicate"))
            admission = await admit(transaction)
            if isinstance(admission, Refusal):
                raise _Refused(admission)
            limit = admission.limit
            if limit is not None:
                # Counted now only when deciding again (a full scope fails the guard first).
                if fresh and await self.count(scope) >= limit:
                    raise _Refused(Refusal("full", limit=limit))
                transaction.require_fewer(count_key, limit)
            change = Change(trigger, None, admission.job)
            return self._queue(transaction, change, admission.equipment)

        assumed: dict[str, str | None] = {job_key: None, response_key: None}
        return await self._swap(scope, watch, attempt, assumed)

    async def transition(
        self,
        scope: str,
        job_order_id: str,
        trigger: Trigger,
        edit: Edit | None = None,
        *,
        equipment: Collection[str] | None = None,
        run: str | None = None,
    ) -> Change | Refusal:
        """Move the job by ``trigger`` if its stored state allows it; ``edit`` adjusts the job;
        ``equipment`` as for ``create``; ``run``: only the job order stored at that time (its
        ``StoredAt``), not one stored again since under the same id (refused as unknown)."""
        job_key = self.job_key(scope, job_order_id)
        response_key = self.response_key(scope, job_order_id)

        async def attempt(transaction: ScopeTransaction, fresh: bool) -> Change:
            document, response = await transaction.get_json_many([job_key, response_key])
            if document is None:
                raise _Refused(Refusal("unknown"))
            before = StoredJob.from_documents(document, response)
            if run and before.stored_at != run:
                raise _Refused(Refusal("unknown"))  # the id names a job order stored since
            destination = next_state(before.state, trigger)
            if destination is None:
                raise _Refused(Refusal("invalid-state", state=before.state))
            after = before.moved_to(destination)
            if edit is not None:
                after = edit(after)
            return self._queue(transaction, Change(trigger, before, after), equipment)

        return await self._swap(scope, [job_key, response_key], attempt)

    async def _swap(
        self,
        scope: str,
        watch: list[str],
        attempt: Attempt,
        assumed: Mapping[str, str | None] | None = None,
    ) -> Change | Refusal:
        """Decide and commit, on remembered (or ``assumed``) texts first, then on fresh reads
        while the commit's guards find them changed."""
        fresh = False
        pending = _take_marker(scope)
        for tries in range(self.retry_limit):
            known = {} if fresh else {**(assumed or {}), **self.texts.known(watch)}
            try:
                async with self.store.transaction(scope, watch=watch, known=known) as transaction:
                    change = await attempt(transaction, fresh)
                    if pending is not None:
                        marker = pending.marker
                        transaction.pipeline.set(marker.key, marker.text, ex=marker.ttl_seconds)
            except _Refused as refused:
                if known:  # decided on texts not read now: decide again on what is stored
                    self.texts.forget(watch)
                    fresh = True
                    continue
                return refused.refusal
            except WatchError:
                # Another instance changed the job (or the scope's job count), or what was
                # remembered is stale: decide again on what is read now. Random, growing
                # pauses keep many contenders from colliding in lockstep.
                self.texts.forget(watch)
                if fresh:
                    await anyio.sleep(random.uniform(0, min(0.0005 * 2**tries, 0.05)))
                fresh = True
                continue
            except BaseException:
                self.texts.forget(watch)  # the commit may or may not have happened
                raise
            if pending is not None:
                pending.written = True
            self.texts.remember(transaction.texts)
            if change.after.state is JobState.END:  # deleted: nothing left to remember
                self.texts.forget(self._keys(scope, change.after.job_order_id))
            return change
        raise GatewayError(
            f"jobs of scope {scope!r} kept changing: gave up after {self.retry_limit} attempts"
        )

    def _queue(
        self,
        transaction: ScopeTransaction,
        change: Change,
        equipment: Collection[str] | None = None,
    ) -> Change:
        """Queue the documents, index updates and change record of ``change``."""
        scope, after, before = transaction.scope, change.after, change.before
        job_order_id = after.job_order_id
        pipeline = transaction.pipeline
        job_key = self.job_key(scope, job_order_id)
        response_key = self.response_key(scope, job_order_id)
        if after.state is JobState.END:
            pipeline.delete(job_key, response_key)
            pipeline.zrem(self.priority_key(scope), job_order_id)
            _move(pipeline, job_order_id, self._state_keys(scope, before), [])
        else:
            transaction.set_json(job_key, after.document())
            transaction.set_json(response_key, to_json(after.response))
            if before is None or before.state.top is not after.state.top:
                _move(
                    pipeline,
                    job_order_id,
                    self._state_keys(scope, before),
                    [self.state_key(scope, after.state.top)],
                )
            if before is None or before.priority != after.priority:
                pipeline.zadd(self.priority_key(scope), {job_order_id: -after.priority})
        if after.results_due is not None and after.state is not JobState.END:
            pipeline.zadd(self.results_due_key(scope), {job_order_id: after.results_due})
        elif before is not None and before.results_due is not None:
            pipeline.zrem(self.results_due_key(scope), job_order_id)
        queue_change(
            pipeline,
            self.queue_keys,
            scope,
            job_order_id,
            None if before is None else before.state,
            after.state,
            lambda: entry_json(
                after.priority,
                after.job_order.start_time,
                required_equipment(after) if equipment is None else equipment,
            ),
        )
        transaction.append_change(change_record(scope, change))
        return change

    def _state_keys(self, scope: str, job: StoredJob | None) -> list[str]:
        return [] if job is None else [self.state_key(scope, job.state.top)]


def _move(pipeline: Any, member: str, sources: Iterable[str], targets: Iterable[str]) -> None:
    for key in sources:
        pipeline.srem(key, member)
    for key in targets:
        pipeline.sadd(key, member)


def change_record(scope: str, change: Change) -> ChangeRecord:
    """The change-stream record of ``change`` (``gateway.changes``): what the MES publisher
    needs. ``has_result`` says the Job Response is final (Ended / Aborted, and no recipe results
    are awaited any more), so it may be published; the record carries the documents the
    publisher makes retained (the order when it is new or changed, the response once it is
    final), so publishing costs no reads and a replayed record publishes the same bytes.
    """
    after = change.after
    return ChangeRecord(
        trigger=change.trigger,
        scope=scope,
        job_order_id=after.job_order_id,
        state=after.state,
        previous=change.previous_state,
        priority=after.priority,
        has_result=after.has_result,
        job_order=_compact(to_json(after.job_order)) if change.trigger.sets_order else None,
        job_response=_compact(to_json(after.response)) if after.state.final else None,
    )


def _parsed(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))
