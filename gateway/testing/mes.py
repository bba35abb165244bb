"""An MES that reads the publisher's retained topics: gap detection and resync, over MQTT only.

For tests and for integrators who want to see how an MES catches up after an outage::

    async with connect_test_client(url) as client:
        mes = MesClient(client, "jobs", "cell1", last_seq=87, last_epoch="9f2c51d07ab3e6f1")
        report = await mes.resync()          # read the index, every result, Clear them
        report.gap                           # Gap(kind="missed", missed=16) ...
        mes.results                          # job order id -> Job Response it processed

``resync`` follows the publisher's contract (``schemas/publisher/retained-topics.schema.json``):

1. subscribe to ``{prefix}/{scope}/state-index``: the broker hands over the retained index,
   which lists every job inline (``jobs``: id, state, ``has_result``), as the MicroDCS design
   defines it. With the publisher's opt-in paged index (``publisher.index_pages``; construct
   the client with ``paged=True``) it also subscribes to the pages ``{prefix}/{scope}/index/+``:
   the index then lists its pages (number, jobs, ``seq`` of the page's last change), and the
   jobs are the pages' (a page at least as new as the index says);
2. compare its ``seq`` and ``epoch`` with the last ones seen: the next ``seq`` means nothing
   was missed, a higher one in the same epoch means updates were missed, another epoch means
   the publisher restarted;
3. read ``result/+`` (retained) for every job the index lists with ``has_result``, record each
   response, then Clear the job through ``{prefix}/{scope}/commands`` (the acknowledgement:
   the gateway ends the job and the publisher deletes its topics);
4. if updates were missed: read ``order/+`` for the jobs still in progress, to reconcile them
   against the MES's own records.

Job payloads stay plain JSON (``dict``); this module knows no plugin's types.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import ObjectReceiveStream

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.testing.mqtt import MqttTestClient
from gateway.topics import MesTopics

CLEAR_TYPE = "org.opcfoundation.ISA95-JOBCONTROL_V2.Clear.v2"
NO_ERROR = 1  # ISA95-JOBCONTROL ReturnStatus: bit 0 set means success
GapKind = Literal["first", "none", "missed", "restart", "stale"]


class MesError(Exception):
    """The gateway or the publisher did not answer as the contract says."""


@dataclass(frozen=True)
class IndexedJob:
    job_order_id: str
    state: tuple[str, ...]  # state texts, top level first: ("Ended", "Completed")
    has_result: bool

    @property
    def top_state(self) -> str:
        return self.state[0] if self.state else ""


@dataclass(frozen=True)
class PageRef:
    """A page of the index as the index lists it."""

    page: int
    jobs: int
    seq: int  # the page is at least this new


@dataclass(frozen=True)
class StateIndex:
    seq: int
    epoch: str
    scope: str
    published_at: str
    jobs: tuple[IndexedJob, ...]  # every job (paged: of every page, page by page)
    pages: tuple[PageRef, ...] = ()
    jobs_total: int = 0

    @classmethod
    def from_json(cls, data: Any, pages: Mapping[int, Any] | None = None) -> StateIndex:
        """The index of a ``state-index`` payload: its inline ``jobs``, or (paged) the jobs of
        its ``pages`` (page number -> page payload); ``MesError`` when it is not one or a
        page is missing."""
        try:
            refs: tuple[PageRef, ...] = ()
            if "jobs" in data:
                listed: list[Any] = list(data["jobs"])
            else:
                refs = tuple(
                    PageRef(int(r["page"]), int(r["jobs"]), int(r["seq"])) for r in data["pages"]
                )
                listed = []
                for ref in refs:
                    page = (pages or {}).get(ref.page)
                    if page is None:
                        raise MesError(f"page {ref.page} of the state index is missing")
                    listed.extend(page["jobs"])
            jobs = tuple(
                IndexedJob(
                    job["job_order_id"],
                    tuple(entry["state_text"]["text"] for entry in job["state"]),
                    bool(job["has_result"]),
                )
                for job in listed
            )
            return cls(
                int(data["seq"]),
                data["epoch"],
                data["scope"],
                data["published_at"],
                jobs,
                refs,
                int(data.get("jobs_total", len(jobs))),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise MesError(f"not a state index: {error!r}") from None

    def job(self, job_order_id: str) -> IndexedJob | None:
        return next((job for job in self.jobs if job.job_order_id == job_order_id), None)


class _Pages:
    """The retained pages of a scope's index as they arrive, by page number."""

    def __init__(self) -> None:
        self.pages: dict[int, Any] = {}
        self._changed = anyio.Event()

    async def fill(self, messages: ObjectReceiveStream[MqttMessage]) -> None:
        async for message in messages:
            try:
                number = int(message.topic.rsplit("/", 1)[-1])
            except ValueError:
                continue
            if message.payload:
                self.pages[number] = from_mqtt(message).data
            else:
                self.pages.pop(number, None)
            self._changed.set()
            self._changed = anyio.Event()

    def _complete(self, data: Any) -> bool:
        for ref in data.get("pages", ()) if isinstance(data, dict) else ():
            page = self.pages.get(ref.get("page"))
            if not isinstance(page, dict) or page.get("seq", 0) < ref.get("seq", 0):
                return False
        return True

    async def resolve(
        self, message: MqttMessage, later: ObjectReceiveStream[MqttMessage]
    ) -> StateIndex:
        """The index of ``message`` once every page it lists (that new) has arrived; an index
        that comes meanwhile replaces it (its pages may already be gone)."""
        data = from_mqtt(message).data
        while not self._complete(data):
            try:
                newer = later.receive_nowait()  # type: ignore[attr-defined]  # a memory stream
            except anyio.WouldBlock:
                with anyio.move_on_after(0.05):
                    await self._changed.wait()
                continue
            if newer.payload:
                data = from_mqtt(newer).data
        return StateIndex.from_json(data, self.pages)


@dataclass(frozen=True)
class Gap:
    """How an index relates to the last one seen.

    ``first``: nothing seen before; ``none``: the next one, nothing missed; ``missed``: ``missed``
    updates were not seen; ``restart``: another epoch (the publisher restarted: reconcile);
    ``stale``: not newer than the last one seen (ignore it).
    """

    kind: GapKind
    missed: int = 0

    @property
    def must_resync(self) -> bool:
        return self.kind in ("first", "missed", "restart")


@dataclass
class ResyncReport:
    gap: Gap
    index: StateIndex | None
    results: dict[str, Any] = field(default_factory=dict)  # processed in this resync
    cleared: list[str] = field(default_factory=list)
    orders: dict[str, Any] = field(default_factory=dict)  # of the jobs still in progress


@dataclass
class MesClient:
    """The MES side of one scope; ``last_seq`` / ``last_epoch`` are what it saw before."""

    client: MqttTestClient
    topic_prefix: str
    scope: str
    last_seq: int | None = None
    last_epoch: str | None = None
    source: str = "urn:test:mes"
    clear_concurrency: int = 16
    paged: bool = False  # the publisher's opt-in paged index (publisher.index_pages)
    results: dict[str, Any] = field(default_factory=dict)  # every result it processed

    def topic(self, *levels: str) -> str:
        """A topic of the scope: ``topic("state-index")``, ``topic("result", "+")``..."""
        topics = MesTopics(self.topic_prefix)
        match levels:
            case ("state-index",):
                return topics.state_index(self.scope)
            case ("commands",):
                return topics.commands(self.scope)
            case ("index", page):
                return topics.index_page(self.scope, page)
            case ("order" | "result" as kind, job_order_id):
                return topics.job(kind, self.scope, job_order_id)
        raise ValueError(f"not a topic of the MES interface: {levels!r}")

    # -- the state index --------------------------------------------------------------------

    @asynccontextmanager
    async def _indexes(self) -> AsyncIterator[AsyncIterator[StateIndex]]:
        """Indexes as they come (the retained one first), each with its jobs."""
        async with self.client.watch(self.topic("state-index")) as messages:
            if not self.paged:

                async def inline() -> AsyncGenerator[StateIndex, None]:
                    async for message in messages:
                        if message.payload:
                            data = from_mqtt(message).data
                            if isinstance(data, dict) and "pages" in data:
                                raise MesError("the state index is paged: use paged=True")
                            yield StateIndex.from_json(data)

                async with aclosing(inline()) as stream:
                    yield stream
                return
            pages = _Pages()
            async with (
                self.client.watch(self.topic("index", "+")) as page_messages,
                anyio.create_task_group() as tasks,
            ):
                tasks.start_soon(pages.fill, page_messages)

                async def paged() -> AsyncGenerator[StateIndex, None]:
                    async for message in messages:
                        if message.payload:
                            yield await pages.resolve(message, messages)

                async with aclosing(paged()) as stream:
                    yield stream
                tasks.cancel_scope.cancel()

    async def index(self, *, timeout: float = 5.0) -> StateIndex | None:
        """The retained state index; ``None`` when the broker has none within ``timeout``."""
        with anyio.move_on_after(timeout):
            async with self._indexes() as indexes:
                async for index in indexes:
                    return index
        return None

    def compare(self, index: StateIndex) -> Gap:
        """Classify ``index`` against the last one seen, and remember it if it is newer."""
        if self.last_seq is None or self.last_epoch is None:
            gap = Gap("first")
        elif index.epoch != self.last_epoch:
            gap = Gap("restart")
        elif index.seq <= self.last_seq:
            return Gap("stale")
        elif index.seq == self.last_seq + 1:
            gap = Gap("none")
        else:
            gap = Gap("missed", index.seq - self.last_seq - 1)
        self.last_seq, self.last_epoch = index.seq, index.epoch
        return gap

    async def follow(
        self, until: Callable[[StateIndex], bool], *, timeout: float = 10.0
    ) -> list[tuple[StateIndex, Gap]]:
        """Index updates as they come (the retained one first), until ``until`` holds for one.

        ``TimeoutError`` when none does within ``timeout``.
        """
        seen: list[tuple[StateIndex, Gap]] = []
        with anyio.fail_after(timeout):
            async with self._indexes() as indexes:
                async for index in indexes:
                    seen.append((index, self.compare(index)))
                    if until(index):
                        return seen
        raise MesError("the state index subscription ended")  # pragma: no cover

    # -- retained job topics ----------------------------------------------------------------

    async def retained(
        self,
        kind: Literal["order", "result"],
        expected: Collection[str],
        *,
        timeout: float = 5.0,
    ) -> dict[str, Any]:
        """The retained ``kind`` documents of the scope, by job order id.

        Waits until every id in ``expected`` has arrived, or ``timeout`` passed (then returns
        what came: a missing id is the caller's finding). A zero-byte message is a delete.
        """
        documents: dict[str, Any] = {}
        wanted = set(expected)
        if not wanted:
            return documents
        async with self.client.watch(self.topic(kind, "+")) as messages:
            with anyio.move_on_after(timeout):
                async for message in messages:
                    _take(documents, message)
                    if wanted <= documents.keys():
                        break
        return documents

    # -- acknowledging ----------------------------------------------------------------------

    async def clear(self, job_order_id: str, *, timeout: float = 5.0) -> int:
        """Clear the job (the MES has its result); the reply's ReturnStatus."""
        event = CloudEvent(
            type=CLEAR_TYPE,
            source=self.source,
            subject=self.scope,
            data={"JobOrderID": job_order_id},
        )
        reply = await self.client.request(self.topic("commands"), event, timeout=timeout)
        if not isinstance(reply.data, dict) or not isinstance(reply.data.get("ReturnStatus"), int):
            raise MesError(f"Clear of {job_order_id} failed: {reply.errormessage or reply.data}")
        status: int = reply.data["ReturnStatus"]
        return status

    # -- catching up ------------------------------------------------------------------------

    async def resync(self, *, timeout: float = 10.0) -> ResyncReport:
        """Read the index; take every result it lists and Clear those jobs.

        Results are taken whatever the gap says: a job the index lists with ``has_result`` has
        not been cleared yet, whether its update was seen live or missed. When updates may have
        been missed (``Gap.must_resync``), the orders of the other jobs are read as well.
        """
        index = await self.index(timeout=min(timeout, 5.0))
        if index is None:
            return ResyncReport(Gap("first"), None)
        report = ResyncReport(self.compare(index), index)
        await self._take_results(report, timeout)
        if report.gap.must_resync:
            pending = [job.job_order_id for job in index.jobs if not job.has_result]
            report.orders = await self.retained("order", pending, timeout=timeout)
        return report

    async def _take_results(self, report: ResyncReport, timeout: float) -> None:
        assert report.index is not None
        finished = [job.job_order_id for job in report.index.jobs if job.has_result]
        results = await self.retained("result", finished, timeout=timeout)
        missing = set(finished) - results.keys()
        if missing:
            raise MesError(f"no retained result for {', '.join(sorted(missing))}")
        report.results = results
        self.results.update(results)  # recorded before it is acknowledged
        slots = anyio.Semaphore(self.clear_concurrency)

        async def clear(job_order_id: str) -> None:
            async with slots:
                status = await self.clear(job_order_id, timeout=timeout)
            if status != NO_ERROR:
                raise MesError(f"Clear of {job_order_id} returned {status}")
            report.cleared.append(job_order_id)

        async with anyio.create_task_group() as tasks:
            for job_order_id in finished:
                tasks.start_soon(clear, job_order_id)


def _take(documents: dict[str, Any], message: MqttMessage) -> None:
    job_order_id = message.topic.rsplit("/", 1)[-1]
    if message.payload:
        documents[job_order_id] = from_mqtt(message).data
    else:
        documents.pop(job_order_id, None)
