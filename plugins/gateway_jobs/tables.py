"""The tables ``gateway jobs`` and ``gateway scope`` print for people: they fit the terminal
(80 columns and up) without breaking a word: long state names abbreviated, times as short as
they can be read, the rest cut with an ellipsis (``--json`` has everything).

Results are counted as the MES sees them: the action results of the Job Response, not the
entries the station adds for its own bookkeeping (the recipe version, the chosen Work Master, the
queue position, the error and the side-effects flag).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.table import Table

from gateway.compensation import COMPENSATIONS_ID, ROLLBACK_ID
from gateway.recipes import RECIPE_VERSION_ID
from gateway_jobs.control import ERROR_ID, SIDE_EFFECTS_ID
from gateway_jobs.queue import QUEUE_POSITION_ID
from gateway_jobs.stored import WORK_MASTER_ID

BOOKKEEPING = frozenset(
    {
        RECIPE_VERSION_ID,
        WORK_MASTER_ID,
        QUEUE_POSITION_ID,
        ERROR_ID,
        SIDE_EFFECTS_ID,
        ROLLBACK_ID,
        COMPENSATIONS_ID,
    }
)
# Top-level states too long for a column of an 80-column table, as the tables write them.
ABBREVIATIONS = {
    "NotAllowedToStart": "NotAllowed",
    "AllowedToStart": "Allowed",
    "InitialState": "Initial",
    "EndState": "End",
}


JOB_WIDTH = 14  # a job id (or a result's ID) longer than this is cut
COLUMN_GAP = 2  # the space a column takes beside its text
EDGES = 2  # and the table at the line's ends
MIN_LAST = 5


def state_path(document: Mapping[str, Any]) -> str:
    """``Ended.Completed`` from a Job Response's or status event's ``JobState``."""
    states = document.get("JobState") or []
    texts = [
        str((entry.get("StateText") or {}).get("Text", "?"))
        for entry in states
        if isinstance(entry, Mapping)
    ]
    return ".".join(texts) or "?"


def short_state(path: str) -> str:
    """``NotAllowedToStart.Ready`` as ``NotAllowed.Ready``: a state path that fits a column."""
    top, dot, rest = path.partition(".")
    return ABBREVIATIONS.get(top, top) + dot + rest


def results(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The Job Response's entries the MES reads as results (bookkeeping left out)."""
    return [
        entry
        for entry in response.get("JobResponseData") or []
        if isinstance(entry, Mapping) and entry.get("ID") not in BOOKKEEPING
    ]


def error(response: Mapping[str, Any]) -> str:
    """Why the job failed: its ``Error`` entry, else its description; empty when none."""
    for entry in response.get("JobResponseData") or []:
        if isinstance(entry, Mapping) and entry.get("ID") == ERROR_ID and entry.get("Value"):
            return value_text(entry["Value"])
    return ""


def short_time(value: Any, now: datetime | None = None) -> str:
    """An RFC 3339 time in UTC as ``07:21:05`` when it is today, else ``11-26 07:21``."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value[:16]
    else:
        return ""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    today = (now or datetime.now(UTC)).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%m-%d %H:%M")


def took(start: Any, end: Any) -> str:
    """How long a job ran, from its start and end (RFC 3339): ``850 ms``, ``12 s``, ``3 min``,
    ``2.5 h``; empty while it runs."""
    first, last = _moment(start), _moment(end)
    if first is None or last is None:
        return ""
    seconds = max(0.0, (last - first).total_seconds())
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def long_time(value: Any) -> str:
    """An ISO 8601 time as ``2026-11-26 07:21:05`` (seconds are enough to read)."""
    if isinstance(value, datetime):
        value = value.isoformat()
    if not isinstance(value, str) or not value:
        return ""
    return value.replace("T", " ")[:19]


def value_text(value: Any) -> str:
    """A result as people read it: text as it is, an object as ``key=value, ...``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={value_text(item)}" for key, item in value.items())
    if isinstance(value, list) and all(not isinstance(item, Mapping | list) for item in value):
        return ", ".join(value_text(item) for item in value)
    return json.dumps(value)


def _table(title: str | None = None, *, header: bool = True) -> Table:
    # No vertical rules and one space between columns: the most room for the data.
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD if header else None,
        show_header=header,
        pad_edge=False,
        collapse_padding=True,
        expand=False,
    )


def jobs_table(
    scope: str,
    responses: Sequence[Mapping[str, Any]],
    priorities: Mapping[str, int],
    width: int = 80,
    now: datetime | None = None,
) -> Table:
    """``gateway jobs list``: job, state, priority, start, how long it ran, results, error."""
    rows = []
    for response in responses:
        job = str(response.get("JobOrderID", "?"))
        priority = priorities.get(job)
        rows.append(
            (
                job,
                short_state(state_path(response)),
                "" if priority is None else str(priority),
                short_time(response.get("StartTime"), now),
                took(response.get("StartTime"), response.get("EndTime")),
                str(len(results(response))),
                error(response),
            )
        )
    table = _table(f"jobs in {scope}")
    heads = ("job", "state", "prio", "started", "took", "results")
    used = sum(
        _fixed(table, head, [row[index] for row in rows], right=head in ("prio", "results"))
        for index, head in enumerate(heads)
    )
    _last(table, "error", width - used)
    for row in rows:
        table.add_row(*row)
    return table


def _fixed(table: Table, head: str, cells: Sequence[str], *, right: bool = False) -> int:
    """A column as wide as its widest cell (a job id at most ``JOB_WIDTH``, cut after with an
    ellipsis); the room it takes, the space beside it included."""
    width = max([len(head), *map(len, cells)])
    if head in ("job", "field"):
        width = min(width, JOB_WIDTH)
    table.add_column(
        head, justify="right" if right else "left", no_wrap=True, overflow="ellipsis", width=width
    )
    return width + COLUMN_GAP


def _last(table: Table, head: str, room: int, *, wrap: bool = False) -> None:
    """The last column: what is left of the line (rich would squeeze the others to fit it),
    cut with an ellipsis; ``wrap``: wrapped at spaces first, a word never split."""
    table.add_column(
        head, no_wrap=not wrap, overflow="ellipsis", max_width=max(MIN_LAST, room - EDGES)
    )


def job_table(job: str, response: Mapping[str, Any], width: int = 80) -> Table:
    """``gateway jobs show``: state, times, error, then every entry of the Job Response."""
    rows = [
        ("state", state_path(response)),
        ("started", long_time(response.get("StartTime")) or "-"),
        ("ended", long_time(response.get("EndTime")) or "-"),
    ]
    if failed := error(response):
        rows.append(("error", failed))
    for entry in response.get("JobResponseData") or []:
        if isinstance(entry, Mapping) and entry.get("ID") != ERROR_ID:
            rows.append((str(entry.get("ID")), value_text(entry.get("Value"))))
    table = _table(f"job {job}", header=False)
    used = _fixed(table, "field", [row[0] for row in rows])
    _last(table, "value", width - used, wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def queue_table(queue: Mapping[str, Any], width: int = 80, now: datetime | None = None) -> Table:
    """``gateway scope queue``: the jobs running, then the waiting ones in start order."""
    rows = [
        ("run", entry["JobOrderID"], "", "", ", ".join(entry["Equipment"]))
        for entry in queue.get("Running") or []
    ]
    rows += [
        (
            str(entry["Position"]),
            entry["JobOrderID"],
            str(entry["Priority"]),
            short_time(entry.get("StartTime"), now),
            ", ".join(entry["Equipment"]),
        )
        for entry in queue.get("Waiting") or []
    ]
    table = _table()
    used = sum(
        _fixed(table, head, [row[index] for row in rows], right=head in ("#", "prio"))
        for index, head in enumerate(("#", "job", "prio", "start time"))
    )
    _last(table, "equipment", width - used)
    for row in rows:
        table.add_row(*row)
    return table
