"""The in-memory state index of one scope, kept current from the change stream.

Each job's index entry is serialised once, when it changes; publishing the index joins the
cached fragments in priority order. An update therefore costs no store read and CPU in
proportion to the bytes the snapshot has anyway, whatever the number of jobs.

Payload (``schemas/publisher/retained-topics.schema.json#/$defs/StateIndex``)::

    {"seq": 104, "epoch": "9f2c51d07ab3e6f1", "scope": "cell1",
     "published_at": "2026-04-11T14:23:01.512Z",
     "jobs": [{"job_order_id": "JO-1",
               "state": [{"state_text": {"text": "Ended", "locale": "en"}, "state_number": 5},
                         {"state_text": {"text": "Completed", "locale": "en"},
                          "state_number": 1}],
               "has_result": true}]}
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.jobstates import SUBSTATES, TOP_STATES


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
    """One job as the state index lists it; ``priority`` only orders the list."""

    job_order_id: str
    state: str
    priority: int = 0
    has_result: bool = False

    def fragment(self) -> bytes:
        """The entry's JSON in the published index."""
        entry = {
            "job_order_id": self.job_order_id,
            "state": state_entries(self.state),
            "has_result": self.has_result,
        }
        return _compact(entry)

    def stored(self) -> str:
        """The entry as the publisher persists it (field of the scope's index hash)."""
        return json.dumps(
            {"state": self.state, "priority": self.priority, "has_result": self.has_result},
            separators=(",", ":"),
        )

    @classmethod
    def from_stored(cls, job_order_id: str, text: str) -> IndexEntry:
        value = json.loads(text)
        return cls(job_order_id, str(value["state"]), int(value["priority"]), value["has_result"])

    @property
    def sort_key(self) -> tuple[int, str]:
        """Highest priority first, then by id: the job management plugin's order."""
        return (-self.priority, self.job_order_id)


class JobIndex:
    """The jobs of one scope that have not left the station, sorted, with cached JSON."""

    def __init__(self, entries: Mapping[str, IndexEntry] | None = None) -> None:
        self._entries: dict[str, IndexEntry] = {}
        self._fragments: dict[str, bytes] = {}
        self._order: list[tuple[int, str]] = []
        for entry in (entries or {}).values():
            self.put(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[IndexEntry]:
        return (self._entries[job_id] for _, job_id in self._order)

    def get(self, job_order_id: str) -> IndexEntry | None:
        return self._entries.get(job_order_id)

    def put(self, entry: IndexEntry) -> None:
        """Add or replace a job's entry: O(log n) search plus one list move."""
        self.remove(entry.job_order_id)
        self._entries[entry.job_order_id] = entry
        self._fragments[entry.job_order_id] = entry.fragment()
        bisect.insort(self._order, entry.sort_key)

    def remove(self, job_order_id: str) -> None:
        entry = self._entries.pop(job_order_id, None)
        if entry is None:
            return
        del self._fragments[job_order_id]
        position = bisect.bisect_left(self._order, entry.sort_key)
        del self._order[position]

    def render(self, *, seq: int, epoch: str, scope: str, published_at: str) -> bytes:
        """The published index: the header, then the cached fragments in order."""
        header = _compact(
            {"seq": seq, "epoch": epoch, "scope": scope, "published_at": published_at}
        )
        jobs = b",".join(self._fragments[job_id] for _, job_id in self._order)
        return header[:-1] + b',"jobs":[' + jobs + b"]}"


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
