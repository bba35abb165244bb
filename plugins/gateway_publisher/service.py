"""The MES publisher service: the scopes' change streams in, retained MQTT topics out.

One active publisher (a lease in the store; others wait as standbys) reads every scope's change
stream and the global stream of scope discoveries with one blocking XREAD, paced: while changes
keep coming it reads at most every ``read_pause_ms``, so a burst makes one batch (the first
change after a quiet spell is read at once). Each scope's batch of records is published and then
committed:

1. the batch's order/result topics (retained, QoS 1, PUBACKs awaited, concurrently);
2. if the index changed: the state index, with the next ``seq`` (already persisted: the last
   commit reserved it, see ``persistence``), after the per-job topics, so an index that says
   ``has_result`` never points to a result the broker does not have yet;
3. the index changes, the batch's last record id and the ``seq`` the next index will carry are
   committed in one script: one Redis command per batch.

A broker publish and a Redis commit cannot be one atomic step, so delivery is **at least once**:
a publisher that dies between 1-2 and 3 applies the batch again after its restart. That is safe
because the retained topics are idempotent (the same record publishes the same content; only
the last retained message of a topic counts) and because ``seq`` was persisted before it was
used, so the repeated index gets a higher number, never a reused one. The committed cursor and
index always match each other, so beyond that one batch a restart neither skips nor replays.

Every start of a leadership term draws a new ``epoch`` and republishes the index of every scope
the publisher has published before, so an MES sees at once that the publisher restarted.

Faults (see ``persistence`` for the fencing):

- A term writes only under its fencing token and publishes only while its lease is certainly
  valid (checked right before every publish), so a publisher that wakes from a long pause
  after another took over publishes nothing and goes back to standby: two publishers never
  publish at once, and ``seq`` only grows.
- The store lost its data (a marker key written at the start of each term vanished, or a
  scope's fence did): the term ends and a new one starts at once, with a new epoch, from what
  the store still holds; scopes it published before that the store forgot get an index too
  (listing what is really there), with ``seq`` continuing from the last one published.
- The broker may have lost its retained messages (the binding reconnected, or connected without
  a session): every retained order, result and index is published again from the mirror the
  publisher keeps in the store.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import anyio
from anyio.abc import TaskStatus
from redis.exceptions import ResponseError

from gateway.changes import ReadPace
from gateway.cloudevents import CloudEvent, format_time, utc_now
from gateway.errors import GatewayError, ValidationError
from gateway.resilience import Outage
from gateway.store import Store, check_scope
from gateway.transport import Binding
from gateway_publisher.batch import Batch, plan
from gateway_publisher.documents import DocumentSourceFactory, Payloads
from gateway_publisher.lease import Lease
from gateway_publisher.persistence import START, Fenced, PublisherStore, ScopeState, StoreLost
from gateway_publisher.settings import PublisherSettings
from gateway_publisher.topics import (
    EVENT_TYPES,
    STATE_INDEX_PAGE_TYPE,
    STATE_INDEX_TYPE,
    RetainedTopics,
)

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

T = TypeVar("T")
Entry = tuple[str, dict[str, str]]
BLOCK_MS = 1000  # one XREAD waits this long at most; stopping interrupts it at once
MAX_CONCURRENT_PUBLISHES = 64
MARKER_CHECK_SECONDS = 0.5  # how often the store is checked for having lost its data


class LeaseExpired(GatewayError):
    """The term can no longer vouch for its lease: it must not publish."""


def new_epoch() -> str:
    """A value no earlier term had: 64 random bits, in hex."""
    return secrets.token_hex(8)


@dataclass
class PublisherStats:
    """What the publisher has done since it was built (for logs, tests and the benchmark)."""

    records: int = 0
    batches: int = 0
    index_publishes: int = 0
    page_publishes: int = 0  # pages of the state index published (deletes included)
    topic_publishes: int = 0
    payload_bytes: int = 0
    busy_seconds: float = 0.0  # in ``process``: planning, publishing, committing
    terms: int = 0
    store_losses: int = 0  # terms ended because the store lost the publisher's state
    heals: int = 0  # times every retained topic was published again


class PublisherService:
    """``gateway.transport.Service`` of role ``publisher``."""

    name = "mes-publisher"
    roles = frozenset({"publisher"})

    def __init__(
        self,
        settings: PublisherSettings,
        topic_prefix: str,
        documents: DocumentSourceFactory | None = None,
    ) -> None:
        self.settings = settings
        self.topic_prefix = topic_prefix
        self.documents = documents
        self.stats = PublisherStats()
        self.term: Term | None = None  # the current term while this instance is active
        self.outage: Outage | None = None  # made in ``run`` from the gateway's resilience
        # Across terms: the last seq published per scope, so an index published after the store
        # forgot a scope (or its seq) still gets a higher number.
        self.published: dict[str, int] = {}
        self.heal_reason: str | None = None  # why every retained topic must be published again
        self._wake: anyio.Event | None = None  # set: a term's blocking read ends early

    def request_heal(self, reason: str) -> None:
        """Publish every retained topic again (the broker may have lost them), soon."""
        self.heal_reason = reason
        if self._wake is not None:
            self._wake.set()

    def take_heal(self) -> str | None:
        reason, self.heal_reason = self.heal_reason, None
        return reason

    @property
    def wake(self) -> anyio.Event:
        """Set when a term has something to do before its next read (made in the event loop)."""
        if self._wake is None or self._wake.is_set():
            self._wake = anyio.Event()
            if self.heal_reason is not None:
                self._wake.set()
        return self._wake

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        store = gateway.store
        if store is None:
            raise GatewayError("the MES publisher needs a store")
        binding = gateway.binding(self.settings.binding)
        payloads = Payloads(None if self.documents is None else self.documents(store))
        topics = RetainedTopics(
            self.topic_prefix, gateway.source, self.settings.retained_ttl_seconds
        )
        # One outage for every loop of the publisher: logged once, readiness check named after it.
        self.outage = gateway.resilience.outage("mes-publisher", logger=log)
        task_status.started()  # a standby is started too; leading comes when the lease does
        waiting_logged = False
        while not gateway.stopping.is_set():
            epoch = new_epoch()
            lease = Lease(
                store,
                instance_id=gateway.instance_id,
                epoch=epoch,
                seconds=self.settings.lease_seconds,
            )
            term = Term(store, binding, topics, payloads, self, lease, epoch)
            if await _acquired(lease, self.outage):
                waiting_logged = False
                self.term = term
                await self._lead(gateway.stopping, term, lease)
                self.term = None
                if term.store_lost:
                    continue  # at once: a new term, a new epoch, what the store still holds
                if term.fenced:  # another publisher took over meanwhile
                    await _pause(gateway.stopping, lease.renew_interval)
                continue
            if not waiting_logged:
                log.info("MES publisher on standby: another instance holds the lease")
                waiting_logged = True
            await self._note_scopes(store)
            await _pause(gateway.stopping, lease.renew_interval)

    async def _note_scopes(self, store: Store) -> None:
        """On standby: remember the scopes the store knows, as if published here. Should the
        store lose its data and this instance's term come next, it still publishes an index
        of what is left (under its new epoch) for each scope the MES has an index of."""
        try:
            scopes = await store.known_scopes()
        except Exception:  # the store away: the lease attempts report that already
            return
        for scope in scopes:
            self.published.setdefault(scope, 0)

    async def _lead(self, stopping: anyio.Event, term: Term, lease: Lease) -> None:
        """One term as the active publisher, until stopping or the lease is lost."""
        self.stats.terms += 1
        assert self.outage is not None  # made in ``run``
        log.info("MES publisher active: epoch %s, topics %s/<scope>/...", term.epoch, term.prefix)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_keep_lease, lease, tasks.cancel_scope, self.outage)
                await term.run(stopping, lease)
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await lease.release()
                except Exception as error:  # it runs out on its own
                    log.warning("MES publisher lease not released: %s", _describe(error))


class Term:
    """One leadership term: a new epoch, the scopes' committed state, the reading loop."""

    def __init__(
        self,
        store: Store,
        binding: Binding,
        topics: RetainedTopics,
        payloads: Payloads,
        service: PublisherService,
        lease: Lease,
        epoch: str,
    ) -> None:
        self.store = store
        self.binding = binding
        self.topics = topics
        self.payloads = payloads
        self.service = service
        self.settings = service.settings
        self.stats = service.stats
        self.lease = lease
        self.epoch = epoch
        self.persisted = PublisherStore(store, page_size=self.settings.index_page_size)
        self.scopes: dict[str, ScopeState] = {}
        self.discovery_stream = store.keys.global_changes()
        self.discovery_cursor = START
        self.marker = store.keys.global_key("publisher", "marker")
        self.incarnation = ""  # the marker's value when the term opened
        self.store_lost = False
        self.fenced = False
        self._marker_checked = 0.0
        self._stream_scopes: dict[str, str] = {}
        self._publishing = anyio.CapacityLimiter(MAX_CONCURRENT_PUBLISHES)
        self.pace = ReadPace(self.settings.read_pause_ms / 1000)

    @property
    def prefix(self) -> str:
        return self.topics.prefix

    async def run(self, stopping: anyio.Event, lease: Lease) -> None:
        """Open, then read and handle batches; a failure is logged and retried with backoff.

        Returns when stopping, when the lease is no longer certain, when another term fenced
        this one off (``fenced``) or when the store lost its data (``store_lost``).
        """
        opened = False
        outage = self.service.outage
        assert outage is not None  # the service made it before the term
        while not stopping.is_set() and lease.valid:
            try:
                if not opened:
                    await self.open()
                    opened = True
                await self.check_store()
                reason = self.service.take_heal()
                if reason is not None:
                    try:
                        await self.heal_broker(reason)
                    except BaseException:
                        self.service.heal_reason = self.service.heal_reason or reason  # again
                        raise
                reply = await _until((stopping, self.service.wake), self.read())
                if reply is None or not lease.valid:
                    continue
                await self.handle(reply)
            except Exception as error:
                if self._ends_term(error):
                    return
                await outage.pause(outage.failed(error), stopping)  # logged once per outage
            else:
                outage.succeeded()
        if not stopping.is_set() and not lease.valid:
            log.warning("MES publisher: lease no longer certain; back to standby")

    def _ends_term(self, error: Exception) -> bool:
        """Whether ``error`` (or one inside it) means this term must end; logs why."""
        if fenced := _find(error, Fenced):
            self.fenced = True
            log.warning("MES publisher: %s; back to standby", fenced)
        elif _find(error, LeaseExpired):
            log.warning("MES publisher: lease no longer certain; back to standby")
        elif lost := _find(error, StoreLost):
            self.store_lost = True
            self.stats.store_losses += 1
            log.warning(
                "MES publisher: the store lost its data (%s); publishing what it still holds "
                "under a new epoch",
                lost,
            )
        else:
            return False
        return True

    async def check_store(self) -> None:
        """``StoreLost`` when the marker written at the start of the term is gone."""
        now = time.monotonic()
        if now - self._marker_checked < MARKER_CHECK_SECONDS:
            return
        marker = await self.store.client.get(self.marker)
        self._marker_checked = now
        if marker != self.incarnation:
            raise StoreLost(f"marker {self.marker} is {'gone' if marker is None else 'new'}")

    # -- scopes -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Every known scope from its committed state; discoveries from before that on.

        The discovery stream's position is taken *before* the set of scopes is read, so a scope
        discovered in between is seen twice (harmless) rather than never.
        """
        await self.persisted.draw_fence()
        client = self.store.client
        await client.set(self.marker, new_epoch(), nx=True)
        self.incarnation = str(await client.get(self.marker))
        self._marker_checked = time.monotonic()
        self.discovery_cursor = await self._last_id(self.discovery_stream)
        # Scopes published before that the store forgot get an index listing what is there.
        scopes = await self.store.reconcile_scopes() | self.service.published.keys()
        for scope in sorted(scopes):
            if scope not in self.scopes:
                await self.open_scope(scope)
        log.info("MES publisher: %d scopes, epoch %s", len(self.scopes), self.epoch)

    async def open_scope(self, scope: str) -> None:
        await self.persisted.claim(scope)
        state = await self.persisted.load(scope)
        await self._warn_if_trimmed(state)
        state.index.mark_dirty()  # every page goes out with the first index of the term
        if state.stored or scope in self.service.published:
            # Published before: announce the new epoch with the current index.
            await self.publish_index(state)
        self.scopes[scope] = state
        self._stream_scopes[self.store.keys.changes(scope)] = scope

    async def _last_id(self, stream: str) -> str:
        entries = await self.store.client.xrevrange(stream, count=1)
        return str(entries[0][0]) if entries else START

    async def _warn_if_trimmed(self, state: ScopeState) -> None:
        """Say so when records after the cursor were trimmed away (MAXLEN): the index misses
        whatever they said until those jobs change again. Redis 7 reports the last trimmed id;
        on 6.2 the check is skipped."""
        try:
            info = await self.store.client.xinfo_stream(self.store.keys.changes(state.scope))
        except ResponseError:  # no stream (yet)
            return
        trimmed = info.get("max-deleted-entry-id")
        if isinstance(trimmed, str) and _stream_id(trimmed) > _stream_id(state.cursor):
            log.error(
                "MES publisher: change records of scope %s after %s were trimmed before they "
                "were published (up to %s); raise redis.change_stream_maxlen",
                state.scope,
                state.cursor,
                trimmed,
            )

    # -- reading ----------------------------------------------------------------------------

    async def read(self) -> list[tuple[str, list[Entry]]]:
        """Up to ``read_count`` new records of every stream, waiting up to ``BLOCK_MS``, when
        the pace allows (``publisher.read_pause_ms`` after a read that returned records)."""
        await self.pace.wait()
        streams = {self.discovery_stream: self.discovery_cursor}
        for scope, state in self.scopes.items():
            streams[self.store.keys.changes(scope)] = state.cursor
        # Through the store: one blocking XREAD on one node, pipelined reads on a Cluster.
        count = self.settings.read_count
        reply = cast(
            list[tuple[str, list[Entry]]],
            await self.store.read_streams(streams, count=count, block_ms=BLOCK_MS),
        )
        self.pace.read(max((len(entries) for _, entries in reply), default=0), count)
        return reply

    async def handle(self, reply: Sequence[tuple[str, Sequence[Entry]]]) -> None:
        """Each stream's records; a scope that fails does not hold the others back (its cursor
        stays, so it is read again), but the first failure is raised once all had their turn."""
        failure: Exception | None = None
        for stream, entries in reply:
            try:
                if stream == self.discovery_stream:
                    await self.discover(entries)
                else:
                    await self.process(self.scopes[self._stream_scopes[stream]], entries)
            except Exception as error:
                failure = failure or error
        if failure is not None:
            raise failure

    async def discover(self, entries: Sequence[Entry]) -> None:
        for entry_id, fields in entries:
            scope = fields.get("scope", "")
            if scope not in self.scopes:
                try:
                    check_scope(scope)
                except ValidationError as error:
                    log.error("scope discovery %s skipped: %s", entry_id, error)
                else:
                    await self.open_scope(scope)
                    log.info("MES publisher: new scope %s", scope)
            self.discovery_cursor = entry_id

    # -- publishing -------------------------------------------------------------------------

    async def process(self, state: ScopeState, entries: Sequence[Entry]) -> None:
        """Publish one batch of a scope's records, then commit it (see the module docstring)."""
        started = time.perf_counter()
        batch = await plan(state.scope, state.index, entries, self.payloads)
        await self._publish_jobs(batch)
        batch.apply()
        try:
            if batch.index_changed:
                await self.publish_index(state)
            reserve = state.to_reserve  # the next index's number, in the same script
            await self.persisted.commit(batch, reserve)
        except BaseException:
            batch.revert()
            raise
        state.committed(batch, reserve)
        self.stats.records += len(entries)
        self.stats.batches += 1
        self.stats.busy_seconds += time.perf_counter() - started

    async def publish_index(self, state: ScopeState) -> None:
        """The next ``seq``, then the index: every job inline (the design's shape), or, with
        ``index_pages``, the pages changed since the last index and then the index listing
        them (after its pages, so an index never lists a page the broker does not have yet)."""
        published = self.service.published
        seq = await self.persisted.next_seq(state, published.get(state.scope, 0))
        index = state.index
        pages = index.take_dirty()  # taken in both modes: the paged mode starts from them
        published_at = format_time(utc_now())
        try:
            if self.settings.index_pages:
                await self._publish_pages(state, pages, seq)
                payload = index.render_paged(
                    seq=seq, epoch=self.epoch, scope=state.scope, published_at=published_at
                )
            else:
                payload = index.render(
                    seq=seq, epoch=self.epoch, scope=state.scope, published_at=published_at
                )
            topic = self.topics.state_index(state.scope)
            await self._publish(topic, self.topics.event(STATE_INDEX_TYPE, state.scope, payload))
        except BaseException:
            index.mark_dirty(page for page in pages if page in index.pages)
            raise
        published[state.scope] = max(seq, published.get(state.scope, 0))
        self.stats.index_publishes += 1

    async def _publish_pages(self, state: ScopeState, pages: set[int], seq: int) -> None:
        """The changed pages of a paged index (an emptied page: its zero-byte delete)."""
        index = state.index
        async with anyio.create_task_group() as tasks:
            for page in pages:
                payload = index.render_page(page, seq=seq, scope=state.scope)
                topic = self.topics.page(state.scope, page)
                event = self.topics.event(STATE_INDEX_PAGE_TYPE, state.scope, payload)
                tasks.start_soon(self._publish, topic, event)
        existing = set(index.pages)
        index.page_seqs.update({page: seq for page in pages if page in existing})
        self.stats.page_publishes += len(pages)

    async def heal_broker(self, reason: str) -> None:
        """Publish every retained order, result and index again, from the store's mirror."""
        topics = 0
        for scope, state in self.scopes.items():
            retained = await self.persisted.retained(scope)
            async with anyio.create_task_group() as tasks:
                for name, payload in retained.items():
                    kind, _, job_order_id = name.partition("/")
                    if kind not in EVENT_TYPES:
                        continue
                    topic = self.topics.job(kind, scope, job_order_id)  # type: ignore[arg-type]
                    event = self.topics.event(EVENT_TYPES[kind], scope, payload.encode())
                    tasks.start_soon(self._publish, topic, event)
            topics += len(retained)
            state.index.mark_dirty()
            await self.publish_index(state)
        self.stats.heals += 1
        log.info(
            "MES publisher: published %d retained topics and %d indexes again (%s)",
            topics,
            len(self.scopes),
            reason,
        )

    async def _publish_jobs(self, batch: Batch) -> None:
        if not batch.topics:
            return
        async with anyio.create_task_group() as tasks:
            for (kind, job_order_id), payload in batch.topics.items():
                topic = self.topics.job(kind, batch.scope, job_order_id)
                event = self.topics.event(EVENT_TYPES[kind], batch.scope, payload)
                tasks.start_soon(self._publish, topic, event)
                self.stats.topic_publishes += 1

    async def _publish(self, topic: str, event: CloudEvent) -> None:
        async with self._publishing:
            if not self.lease.valid:  # e.g. woken from a long pause: another may be active
                raise LeaseExpired(topic)
            await self.binding.publish(topic, event, retain=True, qos=1)
        self.stats.payload_bytes += len(event.data or b"")


async def _acquired(lease: Lease, outage: Outage) -> bool:
    try:
        held = await lease.acquire()
    except Exception as error:
        outage.failed(error)  # logged once per outage; the standby loop paces the retries
        return False
    outage.succeeded()
    return held


async def _keep_lease(lease: Lease, leading: anyio.CancelScope, outage: Outage) -> None:
    """Renew the lease; end the term once it is someone else's or can no longer be vouched for."""
    while True:
        await anyio.sleep(lease.renew_interval)
        try:
            held = await lease.acquire()
        except Exception as error:
            outage.failed(error)
            held = lease.valid
        if not held:
            log.warning("MES publisher: lease lost; back to standby")
            leading.cancel()
            return


async def _until(events: Sequence[anyio.Event], work: Awaitable[T]) -> T | None:
    """``work``'s result, or ``None`` as soon as one of ``events`` is set (``work`` is
    cancelled)."""
    result: list[T] = []
    async with anyio.create_task_group() as tasks:

        async def watch(event: anyio.Event) -> None:
            await event.wait()
            tasks.cancel_scope.cancel()

        for event in events:
            tasks.start_soon(watch, event)
        result.append(await work)
        tasks.cancel_scope.cancel()
    return result[0] if result else None


async def _pause(stopping: anyio.Event, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await stopping.wait()


def _stream_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


E = TypeVar("E", bound=BaseException)


def _find(error: BaseException, kind: type[E]) -> E | None:
    """``error`` if it is a ``kind``, else the first ``kind`` inside it (exception groups)."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            if found := _find(inner, kind):
                return found
    return None


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"
