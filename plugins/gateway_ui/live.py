"""One reader of the Redis streams that open pages follow, handing each new entry to them all.

A page's event stream (``gateway_ui.sse``) follows a scope's change stream and perhaps a job's
trace. Were each page to block in ``XREAD`` of its own, every open page would hold a connection
of the store's pool for as long as it stays open, and a few hundred pages (or one visitor
opening them on purpose) would leave job management none. Here one loop (``LiveFeed.run``, a
service of the UI plugin) reads, in one blocking ``XREAD``, every stream some page follows, and
hands each entry to the pages following that stream; the store sees one blocked connection
however many pages are open.

A page that starts from a cursor behind the newest entry first catches up with short
``XRANGE`` reads (each a moment's use of a pooled connection), then takes what the reader hands
it: it joins the reader's list before it reads, and the reader hands it only entries after the
position it had when the page joined, so nothing falls between the two and nothing comes twice.

A page that does not keep up (its queue of ``QUEUE_ENTRIES`` fills) is dropped: its stream ends
and the browser reconnects with its Last-Event-ID, catching up from the store.

The reader is paced (``gateway.changes.ReadPace``): the first entry after a quiet spell is
handed out at once, and while entries keep coming it reads at most every
``READ_PACE_SECONDS``, so an open dashboard costs the store one read per tenth of a second
under load, not one per change.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway.changes import ReadPace
from gateway.resilience import Resilience
from gateway.store import Store

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

READ_BLOCK_MS = 1000  # one shared read waits this long (a stream newly followed waits as long)
KEEPALIVE_SECONDS = 2.0  # a page with nothing new gets ``None`` (a keep-alive) this often
QUEUE_ENTRIES = 1000  # entries waiting for one page before it is dropped
BATCH = 100  # entries per read
READ_PACE_SECONDS = 0.1  # while entries keep coming, a read at most this often (pages: 10/s)
START = "0-0"

Entries = list[tuple[str, dict[str, str]]]
Batch = list[tuple[str, Entries]]  # (stream key, its entries), as XREAD answers


def stream_id(value: str) -> tuple[int, int]:
    millis, _, sequence = value.partition("-")
    return int(millis), int(sequence or 0)


@dataclass(eq=False)
class _Follower:
    send: MemoryObjectSendStream[tuple[str, str, dict[str, str]]]
    dropped: bool = False


@dataclass
class LiveFeed:
    """The shared reader (``run``) and what pages follow through it (``follow``)."""

    store: Store
    resilience: Resilience
    stopping: anyio.Event = field(default_factory=anyio.Event)  # the gateway's, once it runs
    block_ms: int = READ_BLOCK_MS
    keepalive_seconds: float = KEEPALIVE_SECONDS
    queue_entries: int = QUEUE_ENTRIES
    pace: ReadPace = field(default_factory=lambda: ReadPace(READ_PACE_SECONDS))
    _heads: dict[str, str] = field(default_factory=dict)  # key -> the last id handed out
    _followers: dict[str, set[_Follower]] = field(default_factory=dict)
    _wake: anyio.Event = field(default_factory=anyio.Event)

    name = "ui-live"
    roles = frozenset({"*"})
    before_bindings = True  # pages are served from the start, as the HTTP endpoint is

    @property
    def followed(self) -> int:
        """Streams some page follows."""
        return len(self._heads)

    async def run(self, gateway: Gateway | None = None, *, task_status: TaskStatus[None]) -> None:
        """The one reader: until the gateway stops (a store outage is logged once, fails the
        readiness check ``ui.live`` while it lasts, and is waited out)."""
        if gateway is not None:
            self.stopping = gateway.stopping
        task_status.started()
        outage = self.resilience.outage("ui.live", logger=log)
        try:
            while not self.stopping.is_set():
                if not self._heads:
                    self._wake = anyio.Event()
                    with anyio.move_on_after(self.keepalive_seconds):
                        await self._wake.wait()
                    continue
                await self.pace.wait()
                try:
                    reply = await self.store.read_streams(
                        dict(self._heads), count=BATCH, block_ms=self.block_ms
                    )
                except Exception as error:
                    # A permanent one too: pages keep waiting.
                    await outage.pause(outage.failed(error), self.stopping)
                    continue
                outage.succeeded()
                batch = cast(Batch, reply or [])
                self.pace.read(max((len(entries) for _, entries in batch), default=0), BATCH)
                self._hand_out(batch)
        finally:
            outage.close()

    def _hand_out(self, batch: Batch) -> None:
        for key, entries in batch:
            for entry_id, fields in entries:
                head = self._heads.get(key)
                # Nobody follows the stream any more, or it was dropped and followed again
                # from a later position while this read was under way.
                if head is None or stream_id(entry_id) <= stream_id(head):
                    continue
                self._heads[key] = entry_id
                for follower in list(self._followers.get(key, ())):
                    self._give(follower, key, entry_id, fields)

    def _give(self, follower: _Follower, key: str, entry_id: str, fields: dict[str, str]) -> None:
        if follower.dropped:
            return
        try:
            follower.send.send_nowait((key, entry_id, fields))
        except anyio.WouldBlock:
            follower.dropped = True  # its stream ends; the browser comes back from its cursor
            follower.send.close()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            follower.dropped = True

    async def follow(self, positions: Mapping[str, str]) -> AsyncGenerator[Batch | None]:
        """Batches of the entries after ``positions`` (stream key -> id, ``0-0``: from the
        start), then of new ones as they come, ``None`` after ``keepalive_seconds`` without
        any; ends when the gateway stops or the follower falls too far behind."""
        newest = {key: await self._newest(key) for key in positions if key not in self._heads}
        send, receive = anyio.create_memory_object_stream[tuple[str, str, dict[str, str]]](
            self.queue_entries
        )
        follower = _Follower(send)
        # From here to the registration nothing awaits: the reader cannot move meanwhile.
        upto: dict[str, str] = {}
        for key in positions:
            if key not in self._heads:
                self._heads[key] = newest[key]
                self._wake.set()
            upto[key] = self._heads[key]
            self._followers.setdefault(key, set()).add(follower)
        try:
            for key, cursor in positions.items():
                async for entries in self._catch_up(key, cursor, upto[key]):
                    yield [(key, entries)]
            async for batch in self._live(follower, receive):
                yield batch
        finally:
            send.close()
            receive.close()
            for key in positions:
                followers = self._followers.get(key)
                if followers is None:
                    continue
                followers.discard(follower)
                if not followers:
                    del self._followers[key]
                    self._heads.pop(key, None)

    async def wait(self, positions: Mapping[str, str]) -> Batch | None:
        """The first batch after ``positions``, or ``None`` when nothing came for
        ``keepalive_seconds`` (for a page that looks again at what it shows on any change)."""
        async with aclosing(self.follow(positions)) as batches:
            async for batch in batches:
                return batch
        return None

    async def _live(
        self,
        follower: _Follower,
        receive: MemoryObjectReceiveStream[tuple[str, str, dict[str, str]]],
    ) -> AsyncGenerator[Batch | None]:
        while not self.stopping.is_set():
            first = None
            with anyio.move_on_after(self.keepalive_seconds):
                try:
                    first = await receive.receive()
                except anyio.EndOfStream:
                    return  # dropped: too far behind
            if first is None:
                yield None
                continue
            taken = [first]
            while len(taken) < BATCH:
                try:
                    taken.append(receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            yield _grouped(taken)

    async def _catch_up(self, key: str, after: str, upto: str) -> AsyncGenerator[Entries]:
        """The entries of ``key`` after ``after`` up to ``upto`` (both ids), in short reads."""
        outage = self.resilience.outage("ui.live", logger=log)
        try:
            while stream_id(after) < stream_id(upto) and not self.stopping.is_set():
                try:
                    entries = cast(
                        Entries,
                        await self.store.client.xrange(key, min=f"({after}", max=upto, count=BATCH),
                    )
                except Exception as error:
                    await outage.pause(outage.failed(error), self.stopping)
                    continue
                outage.succeeded()
                if not entries:
                    return
                yield entries
                after = entries[-1][0]
        finally:
            outage.close()

    async def _newest(self, key: str) -> str:
        newest = cast(list[tuple[str, Any]], await self.store.client.xrevrange(key, count=1))
        return newest[0][0] if newest else START


def _grouped(taken: list[tuple[str, str, dict[str, str]]]) -> Batch:
    batch: dict[str, Entries] = {}
    for key, entry_id, fields in taken:
        batch.setdefault(key, []).append((entry_id, fields))
    return list(batch.items())
