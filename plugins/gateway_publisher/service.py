"""The MES publisher service: the scopes' change streams in, retained MQTT topics out.

One active publisher (a lease in the store; others wait as standbys) reads every scope's change
stream and the global stream of scope discoveries with one blocking XREAD. Each scope's batch of
records is published and then committed:

1. the batch's order/result topics (retained, QoS 1, PUBACKs awaited, concurrently);
2. if the index changed: the next ``seq`` is taken from the store (INCR), then the state index is
   published — after the per-job topics, so an index that says ``has_result`` never points to
   a result the broker does not have yet;
3. the index changes and the batch's last record id are committed in one MULTI.

A broker publish and a Redis commit cannot be one atomic step, so delivery is **at least once**:
a publisher that dies between 1-2 and 3 applies the batch again after its restart. That is safe
because the retained topics are idempotent (the same record publishes the same content; only
the last retained message of a topic counts) and because ``seq`` was persisted before it was
used, so the repeated index gets a higher number, never a reused one. The committed cursor and
index always match each other, so beyond that one batch a restart neither skips nor replays.

Every start of a leadership term draws a new ``epoch`` and republishes the index of every scope
the publisher has published before, so an MES sees at once that the publisher restarted.
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

from gateway.cloudevents import CloudEvent, format_time, utc_now
from gateway.errors import GatewayError, ValidationError
from gateway.store import Store, check_scope
from gateway.transport import Binding
from gateway_publisher.batch import Batch, plan
from gateway_publisher.documents import DocumentSourceFactory, Payloads
from gateway_publisher.lease import Lease
from gateway_publisher.persistence import START, PublisherStore, ScopeState
from gateway_publisher.settings import PublisherSettings
from gateway_publisher.topics import EVENT_TYPES, STATE_INDEX_TYPE, RetainedTopics

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

T = TypeVar("T")
Entry = tuple[str, dict[str, str]]
BLOCK_MS = 1000  # one XREAD waits this long at most; stopping interrupts it at once
RETRY_MIN_SECONDS, RETRY_MAX_SECONDS = 0.2, 5.0
MAX_CONCURRENT_PUBLISHES = 64


def new_epoch() -> str:
    """A value no earlier term had: 64 random bits, in hex."""
    return secrets.token_hex(8)


@dataclass
class PublisherStats:
    """What the publisher has done since it was built (for logs, tests and the benchmark)."""

    records: int = 0
    batches: int = 0
    index_publishes: int = 0
    topic_publishes: int = 0
    payload_bytes: int = 0
    busy_seconds: float = 0.0  # in ``process``: planning, publishing, committing
    terms: int = 0


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

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        store = gateway.store
        if store is None:
            raise GatewayError("the MES publisher needs a store")
        binding = gateway.binding(self.settings.binding)
        payloads = Payloads(None if self.documents is None else self.documents(store))
        topics = RetainedTopics(
            self.topic_prefix, gateway.source, self.settings.retained_ttl_seconds
        )
        task_status.started()  # a standby is started too; leading comes when the lease does
        waiting_logged = False
        while not gateway.stopping.is_set():
            term = Term(store, binding, topics, payloads, self.settings, self.stats)
            lease = Lease(
                store,
                instance_id=gateway.instance_id,
                epoch=term.epoch,
                seconds=self.settings.lease_seconds,
            )
            if await _acquired(lease):
                waiting_logged = False
                self.term = term
                await self._lead(gateway.stopping, term, lease)
                self.term = None
                continue
            if not waiting_logged:
                log.info("MES publisher on standby: another instance holds the lease")
                waiting_logged = True
            await _pause(gateway.stopping, lease.renew_interval)

    async def _lead(self, stopping: anyio.Event, term: Term, lease: Lease) -> None:
        """One term as the active publisher, until stopping or the lease is lost."""
        self.stats.terms += 1
        log.info("MES publisher active: epoch %s, topics %s/<scope>/...", term.epoch, term.prefix)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_keep_lease, lease, tasks.cancel_scope)
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
        settings: PublisherSettings,
        stats: PublisherStats,
    ) -> None:
        self.store = store
        self.binding = binding
        self.topics = topics
        self.payloads = payloads
        self.settings = settings
        self.stats = stats
        self.epoch = new_epoch()
        self.persisted = PublisherStore(store)
        self.scopes: dict[str, ScopeState] = {}
        self.discovery_stream = store.keys.global_changes()
        self.discovery_cursor = START
        self._stream_scopes: dict[str, str] = {}
        self._publishing = anyio.CapacityLimiter(MAX_CONCURRENT_PUBLISHES)

    @property
    def prefix(self) -> str:
        return self.topics.prefix

    async def run(self, stopping: anyio.Event, lease: Lease) -> None:
        """Open, then read and handle batches; a failure is logged and retried with backoff."""
        delay, opened = RETRY_MIN_SECONDS, False
        while not stopping.is_set() and lease.valid:
            try:
                if not opened:
                    await self.open()
                    opened = True
                reply = await _until(stopping, self.read())
                if reply is None or not lease.valid:
                    return
                await self.handle(reply)
            except Exception as error:
                log.warning(
                    "MES publisher: %s; retrying in %.1f s",
                    _describe(error),
                    delay,
                    exc_info=log.isEnabledFor(logging.DEBUG),
                )
                await _pause(stopping, delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
            else:
                delay = RETRY_MIN_SECONDS

    # -- scopes -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Every known scope from its committed state; discoveries from before that on.

        The discovery stream's position is taken *before* the set of scopes is read, so a scope
        discovered in between is seen twice (harmless) rather than never.
        """
        self.discovery_cursor = await self._last_id(self.discovery_stream)
        for scope in sorted(await self.store.reconcile_scopes()):
            if scope not in self.scopes:
                await self.open_scope(scope)
        log.info("MES publisher: %d scopes, epoch %s", len(self.scopes), self.epoch)

    async def open_scope(self, scope: str) -> None:
        state = await self.persisted.load(scope)
        await self._warn_if_trimmed(state)
        if state.stored:  # published before: announce the new epoch with the current index
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
        """Up to ``read_count`` new records of every stream, waiting up to ``BLOCK_MS``."""
        streams = {self.discovery_stream: self.discovery_cursor}
        for scope, state in self.scopes.items():
            streams[self.store.keys.changes(scope)] = state.cursor
        reply = await self.store.client.xread(
            streams,  # type: ignore[arg-type]  # redis-py types stream ids too narrowly
            count=self.settings.read_count,
            block=BLOCK_MS,
        )
        return cast(list[tuple[str, list[Entry]]], reply or [])

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
            await self.persisted.commit(batch)
        except BaseException:
            batch.revert()
            raise
        state.committed(batch)
        self.stats.records += len(entries)
        self.stats.batches += 1
        self.stats.busy_seconds += time.perf_counter() - started

    async def publish_index(self, state: ScopeState) -> None:
        seq = await self.persisted.next_seq(state.scope)
        payload = state.index.render(
            seq=seq, epoch=self.epoch, scope=state.scope, published_at=format_time(utc_now())
        )
        topic = self.topics.state_index(state.scope)
        await self._publish(topic, self.topics.event(STATE_INDEX_TYPE, state.scope, payload))
        state.seq = seq
        self.stats.index_publishes += 1

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
            await self.binding.publish(topic, event, retain=True, qos=1)
        self.stats.payload_bytes += len(event.data or b"")


async def _acquired(lease: Lease) -> bool:
    try:
        return await lease.acquire()
    except Exception as error:
        log.warning("MES publisher: lease not taken: %s", _describe(error))
        return False


async def _keep_lease(lease: Lease, leading: anyio.CancelScope) -> None:
    """Renew the lease; end the term once it is someone else's or can no longer be vouched for."""
    while True:
        await anyio.sleep(lease.renew_interval)
        try:
            held = await lease.acquire()
        except Exception as error:
            log.warning("MES publisher: lease not renewed: %s", _describe(error))
            held = lease.valid
        if not held:
            log.warning("MES publisher: lease lost; back to standby")
            leading.cancel()
            return


async def _until(stopping: anyio.Event, work: Awaitable[T]) -> T | None:
    """``work``'s result, or ``None`` as soon as ``stopping`` is set (``work`` is cancelled)."""
    result: list[T] = []
    async with anyio.create_task_group() as tasks:

        async def watch() -> None:
            await stopping.wait()
            tasks.cancel_scope.cancel()

        tasks.start_soon(watch)
        result.append(await work)
        tasks.cancel_scope.cancel()
    return result[0] if result else None


async def _pause(stopping: anyio.Event, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await stopping.wait()


def _stream_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"
