"""The in-memory state index of one scope, kept current from the change stream.

Each job's index entry is serialised once, when it changes; publishing the index joins the
cached fragments in order (highest priority first, then by id). An update costs no store read.

State index (``schemas/publisher/retained-topics.schema.json#/$defs/StateIndex``), the shape of
the MicroDCS MES publishing design: every job inline (``epoch`` and ``jobs_total`` are our
additions)::

    {"seq": 104, "epoch": "9f2c51d07ab3e6f1", "scope": "cell1",
     "published_at": "2026-04-11T14:23:01.512Z", "jobs_total": 1,
     "jobs": [{"job_order_id": "JO-1",
               "state": [{"state_text": {"text": "Ended", "locale": "en"}, "state_number": 5},
                         {"state_text": {"text": "Completed", "locale": "en"},
                          "state_number": 1}],
               "has_result": true}]}

Paged (opt-in, ``publisher.index_pages``, for scopes with thousands of jobs): jobs are kept in
*pages* of at most ``page_size`` jobs, each retained on ``<prefix>/<scope>/index/<page>``
(``...#/$defs/StateIndexPage``); the index lists the pages instead of the jobs (number, how many
jobs, the ``seq`` at which the page last changed), so an update republishes the index and only
the pages it changed::

    {"seq": 104, "epoch": "9f2c51d07ab3e6f1", "scope": "cell1",
     "published_at": "2026-04-11T14:23:01.512Z", "jobs_total": 51,
     "pages": [{"page": 0, "jobs": 50, "seq": 97}, {"page": 1, "jobs": 1, "seq": 104}]}

Pages are tracked in both modes (a job keeps its page from when it is first indexed until it
leaves the station; a new job goes to the lowest-numbered page with room), so switching the
setting needs no migration of the stored index.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.jobstates import SUBSTATES, TOP_STATES

PAGE_SIZE = 25  # jobs per page: bounds the bytes of every update


def state_entries(path: str) -> list[dict[str, Any]]:
    """The ISA95StateDataType array of a state path: the top level, then the substate.

    A name this table does not know keeps its text without a number rather than being
    dropped: the MES still sees what the job management plugin wrote.
    """
    top, _, sub = path.partition(".")
    entries = [_state(top, TOP_STATES.get(top))]
    if sub:
        entries.append(_state(sub, SUBSTATES.get(top, {}).get(sub)))
    return entries


def _state(text: str, number: int | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"state_text": {"text": text, "locale": "en"}}
    if number is not None:
        entry["state_number"] = number
    return entry


@dataclass(frozen=True)
class IndexEntry:
    """One job as the state index lists it; ``priority`` orders, ``page`` places it."""

    job_order_id: str
    state: str
    priority: int = 0
    has_result: bool = False
    page: int | None = field(default=None, compare=False)  # None: not placed yet

    def fragment(self) -> bytes:
        """The entry's JSON in the published page."""
        entry = {
            "job_order_id": self.job_order_id,
            "state": state_entries(self.state),
            "has_result": self.has_result,
        }
        return _compact(entry)

    def stored(self) -> str:
        """The entry as the publisher persists it (field of the scope's index hash)."""
        value: dict[str, Any] = {
            "state": self.state,
            "priority": self.priority,
            "has_result": self.has_result,
        }
        if self.page is not None:
            value["page"] = self.page
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def from_stored(cls, job_order_id: str, text: str) -> IndexEntry:
        value = json.loads(text)
        page = value.get("page")
        return cls(
            job_order_id,
            str(value["state"]),
            int(value["priority"]),
            value["has_result"],
            int(page) if page is not None else None,
        )

    @property
    def sort_key(self) -> tuple[int, str]:
        """Highest priority first, then by id: the job management plugin's order."""
        return (-self.priority, self.job_order_id)


class JobIndex:
    """The jobs of one scope that have not left the station, in pages, with cached JSON."""

    def __init__(
        self, entries: Mapping[str, IndexEntry] | None = None, page_size: int = PAGE_SIZE
    ) -> None:
        self.page_size = page_size
        self._entries: dict[str, IndexEntry] = {}
        self._fragments: dict[str, bytes] = {}
        self._order: list[tuple[int, str]] = []
        self._pages: dict[int, set[str]] = {}
        self._dirty: set[int] = set()  # pages changed since they were last taken
        self.page_seqs: dict[int, int] = {}  # page -> seq of the index it was last published with
        placed = [entry for entry in (entries or {}).values() if entry.page is not None]
        for entry in [*placed, *(e for e in (entries or {}).values() if e.page is None)]:
            self.put(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[IndexEntry]:
        return (self._entries[job_id] for _, job_id in self._order)

    def get(self, job_order_id: str) -> IndexEntry | None:
        return self._entries.get(job_order_id)

    def put(self, entry: IndexEntry) -> IndexEntry:
        """Add or replace a job's entry; returns it as placed (with its page)."""
        current = self._entries.get(entry.job_order_id)
        page = entry.page
        if page is None:
            page = current.page if current is not None else None
        if page is None:
            page = self._free_page()
        placed = replace(entry, page=page)
        self.remove(entry.job_order_id)
        self._entries[entry.job_order_id] = placed
        self._fragments[entry.job_order_id] = placed.fragment()
        bisect.insort(self._order, placed.sort_key)
        self._pages.setdefault(page, set()).add(entry.job_order_id)
        self._dirty.add(page)
        return placed

    def remove(self, job_order_id: str) -> None:
        entry = self._entries.pop(job_order_id, None)
        if entry is None:
            return
        del self._fragments[job_order_id]
        position = bisect.bisect_left(self._order, entry.sort_key)
        del self._order[position]
        assert entry.page is not None
        members = self._pages[entry.page]
        members.discard(job_order_id)
        if not members:
            del self._pages[entry.page]
            self.page_seqs.pop(entry.page, None)
        self._dirty.add(entry.page)

    def _free_page(self) -> int:
        """The lowest-numbered page with room, else the lowest number not in use."""
        for page in sorted(self._pages):
            if len(self._pages[page]) < self.page_size:
                return page
        number = 0
        while number in self._pages:
            number += 1
        return number

    # -- pages -------------------------------------------------------------------------------

    @property
    def pages(self) -> list[int]:
        return sorted(self._pages)

    def take_dirty(self) -> set[int]:
        """The pages changed since the last call (deleted ones included)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def mark_dirty(self, pages: Iterable[int] | None = None) -> None:
        """Publish these pages (default: every page) with the next index."""
        self._dirty.update(self._pages if pages is None else pages)

    def render_page(self, page: int, *, seq: int, scope: str) -> bytes | None:
        """A page's payload; ``None`` when the page no longer exists (delete its topic)."""
        members = self._pages.get(page)
        if not members:
            return None
        ordered = sorted(members, key=lambda job_id: self._entries[job_id].sort_key)
        header = _compact({"seq": seq, "scope": scope, "page": page})
        jobs = b",".join(self._fragments[job_id] for job_id in ordered)
        return header[:-1] + b',"jobs":[' + jobs + b"]}"

    def render(self, *, seq: int, epoch: str, scope: str, published_at: str) -> bytes:
        """The published index in the design's shape: the header, then every job inline."""
        header = _compact(
            {
                "seq": seq,
                "epoch": epoch,
                "scope": scope,
                "published_at": published_at,
                "jobs_total": len(self._entries),
            }
        )
        jobs = b",".join(self._fragments[job_id] for _, job_id in self._order)
        return header[:-1] + b',"jobs":[' + jobs + b"]}"

    def render_paged(self, *, seq: int, epoch: str, scope: str, published_at: str) -> bytes:
        """The paged index (opt-in): the header and one short summary per page."""
        pages = [
            {"page": page, "jobs": len(self._pages[page]), "seq": self.page_seqs.get(page, seq)}
            for page in sorted(self._pages)
        ]
        return _compact(
            {
                "seq": seq,
                "epoch": epoch,
                "scope": scope,
                "published_at": published_at,
                "jobs_total": len(self._entries),
                "pages": pages,
            }
        )


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
