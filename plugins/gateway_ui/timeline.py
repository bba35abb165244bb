"""The timeline of a scope: a Gantt chart drawn on the server as SVG, and its statistics.

One lane per equipment with its commands (coloured by outcome: ``bar ok``, ``bar error``...)
and one lane per job with its states (queued, running, interrupted) and its steps beneath.
Every bar carries its facts as ``data-`` attributes and a ``<title>`` (the tooltip); the page's
script shows them on a click. Beside it, the command-to-reply durations per action type.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from gateway_ui.activity import ActionStats, Activity, CommandBar, JobBar, action_stats
from gateway_ui.pages import page, scope_url

WIDTH = 1000  # the drawing's own units; CSS scales it to its column
LABEL_W = 150
RIGHT = 10
LANE_H = 22
STEP_H = 5
AXIS_H = 24
TICKS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
MINUTES = (5, 15, 60, 240, 1440)  # the zoom levels the page offers
DEFAULT_MINUTES = 60
MAX_MINUTES = 7 * 1440


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @classmethod
    def parse(cls, query: Mapping[str, str], now: float) -> Window:
        """``minutes`` (default 60, at most a week) ending at ``end`` (Unix s, default now);
        ``ValueError`` for what is not a number."""
        minutes = float(query.get("minutes") or DEFAULT_MINUTES)
        end = float(query.get("end") or now)
        if not 0 < minutes <= MAX_MINUTES:
            raise ValueError(f"minutes must be in (0, {MAX_MINUTES}]")
        if not math.isfinite(end):
            raise ValueError("end must be a Unix time")
        return cls(end - minutes * 60, end)

    def fit(self, done: Activity, now: float) -> Window:
        """The part of this window that holds ``done`` (a little more on each side)."""
        starts = [bar.start for bar in done.commands]
        starts += [segment.start for bar in done.jobs for segment in bar.segments]
        ends = [now if bar.end is None else bar.end for bar in done.commands]
        ends += [now if s.end is None else s.end for bar in done.jobs for s in bar.segments]
        if not starts:
            return self
        first, last = max(self.start, min(starts)), min(self.end, max(ends))
        pad = max(1.0, (last - first) * 0.03)
        return Window(max(self.start, first - pad), min(self.end, max(last, first) + pad))


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "open"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _clock(seconds: float, with_seconds: bool) -> str:
    return time.strftime("%H:%M:%S" if with_seconds else "%H:%M", time.gmtime(seconds))


def render_svg(done: Activity, window: Window, now: float) -> str:
    """The Gantt chart of ``done`` over ``window`` (``now`` ends what is still open)."""
    lanes = sorted({bar.equipment for bar in done.commands})
    jobs = sorted(done.jobs, key=lambda bar: bar.segments[0].start if bar.segments else 0.0)
    plot = WIDTH - LABEL_W - RIGHT
    scale = plot / window.seconds

    def x(at: float) -> float:
        return LABEL_W + (min(max(at, window.start), window.end) - window.start) * scale

    def span(start: float, end: float | None) -> tuple[float, float]:
        left = x(start)
        return left, max(2.0, x(now if end is None else end) - left)

    height = AXIS_H + (len(lanes) + len(jobs)) * LANE_H + (LANE_H if jobs and lanes else 0) + 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {WIDTH} {height}"'
        f' width="{WIDTH}" height="{height}" role="img" data-start="{window.start:.3f}"'
        f' data-end="{window.end:.3f}">',
        f"<title>Timeline {_clock(window.start, True)} to {_clock(window.end, True)} UTC</title>",
    ]
    parts.extend(_axis(window, x, height))
    y = AXIS_H
    for lane in lanes:
        parts.append(_label(lane, y, "equipment"))
        parts.append(f'<g class="lane equipment" data-lane="{_e(lane)}">')
        for bar in done.commands:
            if bar.equipment == lane:
                left, width = span(bar.start, bar.end)
                parts.append(_command(bar, left, y, width))
        parts.append("</g>")
        y += LANE_H
    if jobs and lanes:
        y += LANE_H // 2
        parts.append(f'<line class="divider" x1="0" x2="{WIDTH}" y1="{y - 6}" y2="{y - 6}"/>')
        y += LANE_H // 2
    for job in jobs:
        parts.append(_label(job.job, y, "job"))
        parts.append(f'<g class="lane job" data-lane="{_e(job.job)}" data-job="{_e(job.job)}">')
        parts.extend(_job(job, y, span))
        parts.append("</g>")
        y += LANE_H
    if not lanes and not jobs:
        parts.append(
            f'<text class="empty" x="{WIDTH / 2}" y="{AXIS_H + 16}">Nothing happened in this'
            " range.</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _axis(window: Window, x: Any, height: float) -> list[str]:
    step = next((tick for tick in TICKS if window.seconds / tick <= 8), TICKS[-1])
    first = (int(window.start) // step + 1) * step
    parts = []
    at = float(first)
    while at < window.end:
        left = x(at)
        parts.append(
            f'<line class="tick" x1="{left:.1f}" x2="{left:.1f}" y1="{AXIS_H - 6}" '
            f'y2="{height}"/><text class="tick" x="{left:.1f}" y="{AXIS_H - 9}">'
            f"{_clock(at, step < 60)}</text>"
        )
        at += step
    return parts


def _label(text: str, y: float, kind: str) -> str:
    shown = text if len(text) <= 20 else text[:19] + "…"
    return (
        f'<text class="label {kind}" x="4" y="{y + LANE_H / 2 + 4:.1f}">'
        f"<title>{_e(text)}</title>{_e(shown)}</text>"
    )


def _command(bar: CommandBar, left: float, y: float, width: float) -> str:
    tip = (
        f"{bar.action} · job {bar.job} · {bar.equipment} · {_duration(bar.seconds)} · "
        f"{bar.outcome}" + (f": {bar.error}" if bar.error else "")
    )
    return (
        f'<rect class="bar command {bar.outcome}" x="{left:.1f}" y="{y + 3}" '
        f'width="{width:.1f}" height="{LANE_H - 6}" data-job="{_e(bar.job)}" '
        f'data-action="{_e(bar.action)}" data-equipment="{_e(bar.equipment)}" '
        f'data-correlation="{_e(bar.correlation_id)}" data-outcome="{bar.outcome}" '
        f'data-start="{bar.start:.3f}" data-seconds="{_seconds(bar.seconds)}" '
        f'data-error="{_e(bar.error)}"><title>{_e(tip)}</title></rect>'
    )


def _job(job: JobBar, y: float, span: Any) -> list[str]:
    parts = []
    for segment in job.segments:
        left, width = span(segment.start, segment.end)
        kind = segment.state.split(".")[0]
        seconds = None if segment.end is None else segment.end - segment.start
        tip = f"job {job.job} · {segment.state} · {_duration(seconds)}"
        parts.append(
            f'<rect class="bar state {_e(kind)}" x="{left:.1f}" y="{y + 3}" width="{width:.1f}" '
            f'height="{LANE_H - 6 - STEP_H}" data-job="{_e(job.job)}" '
            f'data-state="{_e(segment.state)}" data-start="{segment.start:.3f}" '
            f'data-seconds="{_seconds(seconds)}">'
            f"<title>{_e(tip)}</title></rect>"
        )
    for step in job.steps:
        left, width = span(step.start, step.end)
        seconds = None if step.end is None else step.end - step.start
        tip = f"step {step.state} · job {job.job} · {_duration(seconds)}"
        parts.append(
            f'<rect class="bar step" x="{left:.1f}" y="{y + LANE_H - 3 - STEP_H}" '
            f'width="{width:.1f}" height="{STEP_H}" data-job="{_e(job.job)}" '
            f'data-step="{_e(step.state)}" data-start="{step.start:.3f}" '
            f'data-seconds="{_seconds(seconds)}">'
            f"<title>{_e(tip)}</title></rect>"
        )
    return parts


def stats_table(stats: Sequence[ActionStats]) -> str:
    rows = "".join(
        f'<tr data-type="{_e(s.type)}"><td class="text"><b>{_e(", ".join(s.actions))}</b><br>'
        f'<span class="muted mono">{_e(s.type)}</span></td><td class="num">{s.count}</td>'
        f'<td class="num">{_duration(s.p50)}</td><td class="num">{_duration(s.p95)}</td>'
        f'<td class="num">{_duration(s.max)}</td></tr>'
        for s in stats
    )
    empty = '<tr><td colspan="5" class="muted">No command answered in this range.</td></tr>'
    return (
        '<table id="stats"><thead><tr><th>Action (type)</th><th>Count</th><th>p50</th>'
        f"<th>p95</th><th>Max</th></tr></thead><tbody>{rows or empty}</tbody></table>"
    )


def timeline_page(
    scope: str,
    svg: str,
    stats: Sequence[ActionStats],
    window: Window,
    now: float,
    requested: Window | None = None,
) -> str:
    """``window``: what the drawing shows; ``requested``: the range asked for (larger when
    the drawing fits what happened in it)."""
    requested = requested or window
    base = scope_url(scope) + "/timeline"
    minutes = round(requested.seconds / 60, 3)

    ends_now = requested.end >= now - 1
    end = "" if ends_now else f"&end={requested.end:.0f}"
    fit = f'<a href="{_e(base)}?minutes={minutes:g}{end}&amp;fit=1">fit</a>'
    zoom = " ".join(
        f'<a href="{_e(base)}?minutes={m}{end}"'
        f"{' class=current' if abs(m - minutes) < 1e-6 else ''}>{_span(m)}</a>"
        for m in MINUTES
    )
    earlier = f"{base}?minutes={minutes:g}&end={requested.end - requested.seconds / 2:.0f}"
    later_end = requested.end + requested.seconds / 2
    later = (
        f"{base}?minutes={minutes:g}"
        if later_end >= now
        else f"{base}?minutes={minutes:g}&end={later_end:.0f}"
    )
    body = (
        f"<h1>Timeline of scope {_e(scope)}</h1>"
        f'<p class="range">{_clock(window.start, True)} &#8211; {_clock(window.end, True)} UTC · '
        f'show {zoom} {fit} · <a href="{_e(earlier)}">« earlier</a> · '
        f'<a href="{_e(later)}">later »</a>'
        f' · <a href="{_e(base)}?minutes={minutes:g}">now</a></p>'
        '<div class="timeline-columns"><div>'
        f'<section class="chart" id="timeline">{svg}</section>'
        '<div id="bar-details" class="details muted">Click a bar for its details.</div>'
        '<p class="legend"><span class="key k-ok"></span>answered <span class="key k-error">'
        '</span>error <span class="key k-no-reply"></span>no reply <span class="key '
        'k-undelivered"></span>undelivered <span class="key k-pending"></span>still running · '
        'jobs: <span class="key k-AllowedToStart"></span>queued <span class="key k-Running">'
        '</span>running <span class="key k-Interrupted"></span>interrupted <span class="key '
        'k-Aborted"></span>aborted · thin bars: steps</p>'
        "</div><div><h2>Command durations</h2>"
        f"{stats_table(stats)}"
        '<p class="muted">From command to reply, answered commands in this range.</p>'
        "</div></div>"
    )
    return page(f"Timeline {scope}", [(scope, scope_url(scope)), ("timeline", None)], body)


def _span(minutes: float) -> str:
    return f"{minutes / 60:g} h" if minutes >= 60 else f"{minutes:g} min"


def timeline_json(scope: str, done: Activity, window: Window) -> dict[str, Any]:
    return {
        "scope": scope,
        "start": window.start,
        "end": window.end,
        "commands": [bar.as_json() for bar in done.commands],
        "jobs": [bar.as_json() for bar in done.jobs],
        "stats": [s.as_json() for s in action_stats(done.commands)],
    }
