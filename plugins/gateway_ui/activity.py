"""How a scope spent its time, read back from the jobs' traces: commands, job states, steps.

The dashboard and the timeline draw from the same reading, so both say the same thing:

- a ``CommandBar`` per command sent: from the command to its reply (``ok`` or ``error``), to
  the next try of the same action or the job's end (``no-reply``), or still open (``pending``,
  the equipment is busy with it); a command the driver could not deliver is ``undelivered``;
- a ``JobBar`` per job: its states over time (queued, running, interrupted) and how it ended;
- ``action_stats``: command-to-reply durations per action type (count, p50, p95, max).

Only jobs job management still lists are read (a cleared job's trace stays a while, but the
station no longer shows it), at most ``MAX_JOBS`` of them, newest first.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from gateway.jobstates import TopState
from gateway.recipes import JobControl, JobSummary
from gateway.store import Store
from gateway_ui.trace import TraceKind, happenings, trace_key, with_latencies

MAX_JOBS = 200  # jobs one reading covers at most (the newest); bounds the reads and the drawing


class Outcome(StrEnum):
    """How a command ended, as the timeline colours it."""

    OK = "ok"  # the equipment answered without error
    ERROR = "error"  # the equipment answered with an error
    UNDELIVERED = "undelivered"  # the driver could not hand it over
    NO_REPLY = "no-reply"  # tried again, or the job ended, before any answer
    PENDING = "pending"  # no answer yet: the equipment is working on it


@dataclass(frozen=True)
class CommandBar:
    job: str
    action: str
    correlation_id: str
    type: str
    equipment: str  # the equipment it went to; its type when routed to a driver by type
    start: float  # Unix seconds
    end: float | None  # None: still open
    outcome: Outcome
    error: str | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)

    def as_json(self) -> dict[str, Any]:
        return {
            "job_order_id": self.job,
            "action": self.action,
            "correlation_id": self.correlation_id,
            "type": self.type,
            "equipment": self.equipment,
            "start": self.start,
            "end": self.end,
            "seconds": self.seconds,
            "outcome": str(self.outcome),
            "error": self.error,
        }


@dataclass(frozen=True)
class Segment:
    """A stretch of a job's life in one top-level state."""

    state: str  # the state path it entered (``AllowedToStart.Ready``, ``Running``...)
    start: float
    end: float | None  # None: it is still in it


@dataclass
class JobBar:
    job: str
    state: str  # now
    segments: list[Segment] = field(default_factory=list)
    steps: list[Segment] = field(default_factory=list)  # state: the step's name

    def as_json(self) -> dict[str, Any]:
        return {
            "job_order_id": self.job,
            "state": self.state,
            "segments": [vars(segment) for segment in self.segments],
            "steps": [{"step": s.state, "start": s.start, "end": s.end} for s in self.steps],
        }


@dataclass(frozen=True)
class ActionStats:
    type: str
    actions: tuple[str, ...]  # the recipe actions that sent it
    count: int
    p50: float  # seconds
    p95: float
    max: float

    def as_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "actions": list(self.actions),
            "count": self.count,
            "p50_seconds": round(self.p50, 3),
            "p95_seconds": round(self.p95, 3),
            "max_seconds": round(self.max, 3),
        }


@dataclass
class Activity:
    """What a scope's jobs did, from their traces."""

    commands: list[CommandBar]
    jobs: list[JobBar]

    def in_range(self, start: float, end: float) -> Activity:
        """Only what overlaps ``[start, end]``."""

        def overlaps(first: float, last: float | None) -> bool:
            return first <= end and (last is None or last >= start)

        return Activity(
            [bar for bar in self.commands if overlaps(bar.start, bar.end)],
            [bar for bar in self.jobs if any(overlaps(s.start, s.end) for s in bar.segments)],
        )


def unix(text: str | None) -> float | None:
    """An RFC 3339 time as Unix seconds (``None`` for none or unreadable)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def recent(jobs: Iterable[JobSummary], since: float, limit: int = MAX_JOBS) -> list[JobSummary]:
    """The jobs not ended before ``since``, the newest (by when they were stored) first."""
    kept = [job for job in jobs if (unix(job.end_time) or math.inf) >= since]
    kept.sort(key=lambda job: unix(job.stored_at) or 0.0, reverse=True)
    return kept[:limit]


async def read_traces(
    store: Store, scope: str, jobs: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """The traces of ``jobs``, each oldest first: one round trip for all."""
    if not jobs:
        return {}
    async with store.client.pipeline(transaction=False) as pipe:
        for job in jobs:
            pipe.xrange(trace_key(store, scope, job))
        raw = cast(list[list[tuple[str, dict[str, str]]]], await pipe.execute())
    return {
        job: with_latencies([h for sid, record in entries for h in happenings(sid, record)])
        for job, entries in zip(jobs, raw, strict=True)
    }


def activity(
    summaries: Iterable[JobSummary], traces: Mapping[str, list[dict[str, Any]]], now: float
) -> Activity:
    commands: list[CommandBar] = []
    jobs: list[JobBar] = []
    for summary in summaries:
        entries = traces.get(summary.job_order_id, [])
        open_job = summary.state.top not in (TopState.ENDED, TopState.ABORTED, TopState.END)
        commands.extend(command_bars(summary.job_order_id, entries, open_job=open_job))
        jobs.append(job_bar(summary, entries, now))
    commands.sort(key=lambda bar: bar.start)
    return Activity(commands, jobs)


def command_bars(
    job: str, entries: Sequence[Mapping[str, Any]], *, open_job: bool
) -> list[CommandBar]:
    """The job's commands, each closed by its reply, the next try of its action or the job's
    end (the first state the job reaches after it that is not Running)."""
    bars: dict[str, dict[str, Any]] = {}  # correlation id -> what is known so far
    order: list[str] = []
    latest: dict[str, str] = {}  # action -> correlation id of its newest try
    for entry in entries:
        kind = entry.get("kind")
        if kind == TraceKind.COMMAND:
            correlation = str(entry.get("correlation_id"))
            action = str(entry.get("action"))
            previous = latest.get(action)
            if previous is not None and bars[previous]["end"] is None:
                _close(bars[previous], entry["ts"], Outcome.NO_REPLY)
            error = entry.get("error")
            bar = {
                "action": action,
                "type": str(entry.get("type")),
                "equipment": str(entry.get("equipment") or entry.get("type")),
                "start": entry["ts"],
                "end": entry["ts"] if error else None,
                "outcome": Outcome.UNDELIVERED if error else Outcome.PENDING,
                "error": error,
            }
            if correlation not in bars:
                order.append(correlation)
            bars[correlation] = bar
            latest[action] = correlation
        elif kind == TraceKind.REPLY:
            bar_or_none = bars.get(str(entry.get("correlation_id")))
            if bar_or_none is not None and bar_or_none["outcome"] in (
                Outcome.PENDING,
                Outcome.NO_REPLY,
            ):
                error = entry.get("error")
                bar_or_none["end"] = entry["ts"]
                bar_or_none["outcome"] = Outcome.ERROR if error else Outcome.OK
                bar_or_none["error"] = error
        elif kind == TraceKind.STATE and entry.get("current") != TopState.RUNNING:
            for bar in bars.values():
                if bar["end"] is None:
                    _close(bar, entry["ts"], Outcome.NO_REPLY)
    if not open_job:
        for bar in bars.values():
            if bar["end"] is None:
                bar["outcome"] = Outcome.NO_REPLY
                bar["end"] = bar["start"]
    return [
        CommandBar(
            job=job,
            action=bars[c]["action"],
            correlation_id=c,
            type=bars[c]["type"],
            equipment=bars[c]["equipment"],
            start=bars[c]["start"],
            end=bars[c]["end"],
            outcome=bars[c]["outcome"],
            error=bars[c]["error"],
        )
        for c in order
    ]


def _close(bar: dict[str, Any], at: float, outcome: Outcome) -> None:
    bar["end"] = at
    bar["outcome"] = outcome


def job_bar(summary: JobSummary, entries: Sequence[Mapping[str, Any]], now: float) -> JobBar:
    """The job's states over time from its trace (its stored time when the trace lacks the
    start), and its steps."""
    bar = JobBar(summary.job_order_id, summary.state.value)
    open_steps: dict[str, float] = {}
    for entry in entries:
        kind = entry.get("kind")
        if kind == TraceKind.STATE:
            current = str(entry.get("current"))
            if bar.segments and bar.segments[-1].end is None:
                last = bar.segments[-1]
                bar.segments[-1] = Segment(last.state, last.start, entry["ts"])
            top = _top(current)
            if top is not None and top not in (TopState.INITIAL, TopState.END):
                end = entry["ts"] if top.final else None
                bar.segments.append(Segment(current, entry["ts"], end))
        elif kind == TraceKind.STEP:
            step = str(entry.get("step"))
            if entry.get("active"):
                open_steps[step] = entry["ts"]
            elif step in open_steps:
                bar.steps.append(Segment(step, open_steps.pop(step), entry["ts"]))
    for step, start in open_steps.items():
        bar.steps.append(Segment(step, start, None))
    if not bar.segments:  # no trace (yet, or any more): what the summary says
        start = unix(summary.stored_at) or now
        end = unix(summary.end_time)
        bar.segments.append(Segment(summary.state.value, start, end))
    elif bar.segments[-1].state != summary.state.value and summary.state.final:
        # The trace is written a flush interval after the state: the end it has yet to record.
        last = bar.segments[-1]
        end = max(unix(summary.end_time) or now, last.start)
        bar.segments[-1] = Segment(last.state, last.start, end)
        bar.segments.append(Segment(summary.state.value, end, end))
    return bar


def _top(state: str) -> TopState | None:
    try:
        return TopState.of(state)
    except ValueError:
        return None


def action_stats(bars: Iterable[CommandBar]) -> list[ActionStats]:
    """Command-to-reply durations per command type (answered commands only), slowest p95
    first."""
    durations: dict[str, list[float]] = defaultdict(list)
    actions: dict[str, set[str]] = defaultdict(set)
    for bar in bars:
        if bar.outcome in (Outcome.OK, Outcome.ERROR) and bar.seconds is not None:
            durations[bar.type].append(bar.seconds)
            actions[bar.type].add(bar.action)
    stats = [
        ActionStats(
            type=kind,
            actions=tuple(sorted(actions[kind])),
            count=len(values),
            p50=percentile(values, 50),
            p95=percentile(values, 95),
            max=max(values),
        )
        for kind, values in durations.items()
    ]
    stats.sort(key=lambda s: (-s.p95, s.type))
    return stats


def percentile(values: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile (a value that occurred, never an interpolation)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


async def scope_activity(
    control: JobControl, store: Store, scope: str, since: float, now: float
) -> Activity:
    """What the scope's jobs did since ``since`` (the newest ``MAX_JOBS`` jobs)."""
    shown = recent(await control.jobs(scope), since)
    traces = await read_traces(store, scope, [job.job_order_id for job in shown])
    return activity(shown, traces, now)
