"""The HTML of the station dashboard (``/ui/``): one section per scope.

``sections`` renders what the dashboard's event stream sends too, so the page as served and
as updated are drawn by the same code. Times are absolute (UTC) in the HTML, with the Unix time
in ``data-since`` for the script to show how long ago; the HTML changes only when the station
does, so an unchanged station sends nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from gateway_ui.pages import _e, job_url, page, scope_url


def dashboard_page(snapshot: Mapping[str, Any]) -> str:
    body = (
        "<h1>What the station is doing now</h1>"
        f'<div id="station" data-events="/api/station/events">{sections(snapshot)}</div>'
    )
    return page("Station", [], body)


def sections(snapshot: Mapping[str, Any]) -> str:
    scopes = snapshot["scopes"]
    if not scopes:
        return '<p class="muted">No scope has had a job yet.</p>'
    return "".join(_scope(scope) for scope in scopes)


def clock(seconds: float | None) -> str:
    """``HH:MM:SS`` UTC of a Unix time (empty for none)."""
    return "" if seconds is None else time.strftime("%H:%M:%S", time.gmtime(seconds))


def _since(seconds: float | None, *, ago: bool = False) -> str:
    """A time shown as how long since (by the script; ``ago``: "... ago"), the UTC clock time
    until then."""
    if seconds is None:
        return ""
    kind = "since ago" if ago else "since"
    return f'<span class="{kind}" data-since="{seconds:.3f}">{clock(seconds)}</span>'


def _scope(scope: Mapping[str, Any]) -> str:
    name = scope["scope"]
    if scope["online"]:
        state = '<span class="online">online</span>'
    else:
        reason = f": {_e(scope['reason'])}" if scope["reason"] else ""
        state = f'<span class="offline">offline{reason}</span>'
    capacity = scope["capacity"] or "unlimited"
    links = (
        f'<a href="{_e(scope_url(name))}">all jobs</a> · '
        f'<a href="{_e(scope_url(name) + "/timeline")}">timeline</a>'
    )
    return (
        f'<section class="scope" data-scope="{_e(name)}" data-online="{_flag(scope["online"])}">'
        f'<h2 class="scope-head"><span class="name">Scope {_e(name)}</span> {state}'
        f'<span class="muted"> · runs {_e(capacity)} at once · {links}</span></h2>'
        '<div class="board">'
        f"{_equipment(scope['equipment'])}{_running(name, scope['running'])}"
        f"{_queue(name, scope['queue'])}{_failures(name, scope['failures'])}"
        "</div></section>"
    )


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()


def _table(kind: str, title: str, heads: Sequence[str], rows: list[str], empty: str) -> str:
    head = "".join(f"<th>{name}</th>" for name in heads)
    body = (
        "".join(rows)
        or f'<tr class="empty"><td colspan="{len(heads)}" class="muted">{empty}</td></tr>'
    )
    return (
        f'<div class="panel {kind}"><h3>{title}</h3><table class="{kind}">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _job_link(scope: str, job: str) -> str:
    return f'<a href="{_e(job_url(scope, job))}">{_e(job)}</a>'


def _equipment(rows: list[Mapping[str, Any]]) -> str:
    lines = []
    for row in rows:
        online = row["online"]
        if online is None:
            state = '<span class="muted">no heartbeat</span>'
        elif online:
            state = '<span class="online">online</span>'
        else:
            why = row["offline_reason"] or "offline"
            state = f'<span class="offline" title="{_e(why)}">offline</span>'
        busy = row["busy"]
        doing = (
            '<span class="muted">idle</span>'
            if busy is None
            else f'<span class="busy">{_e(busy["action"])}</span> for {_e(busy["job_order_id"])}'
            f" ({_since(busy['since'])})"
        )
        error = row["last_error"]
        failed = (
            ""
            if error is None
            else f'<span class="bad">{_e(error["error"])}</span> '
            f'<span class="muted">({_e(error["action"])}, {_e(error["job_order_id"])}, '
            f"{_since(error['at'], ago=True)})</span>"
        )
        lines.append(
            f'<tr data-equipment="{_e(row["equipment"])}" data-online="{_flag(online)}" '
            f'data-busy="{_e(busy["action"] if busy else "")}">'
            f'<td class="name">{_e(row["equipment"])}</td><td>{state}</td>'
            f'<td>{doing}</td><td class="text">{failed}</td></tr>'
        )
    return _table(
        "equipment",
        "Equipment",
        ("Equipment", "State", "Doing", "Last error"),
        lines,
        "No equipment used in the last hour.",
    )


def _running(scope: str, jobs: list[Mapping[str, Any]]) -> str:
    lines = []
    for job in jobs:
        steps = _e(", ".join(step["name"] for step in job["steps"])) or "&#8211;"
        actions = ", ".join(f"{a['name']} ({a['phase']})" for a in job["actions"])
        state = job["state"]
        lines.append(
            f'<tr data-job="{_e(job["job_order_id"])}" '
            f'data-steps="{_e(",".join(step["name"] for step in job["steps"]))}">'
            f"<td>{_job_link(scope, job['job_order_id'])}</td>"
            f'<td class="state {_e(state.split(".")[0])}">{_e(state)}</td>'
            f'<td class="text"><span class="step">{steps}</span>'
            f"{'<br><span class=muted>' + _e(actions) + '</span>' if actions else ''}</td>"
            f'<td class="num">{_since(job["started_at"])}</td></tr>'
        )
    return _table(
        "running",
        "Running",
        ("Job", "State", "Current step", "Running for"),
        lines,
        "No job running.",
    )


def _queue(scope: str, jobs: list[Mapping[str, Any]]) -> str:
    lines = [
        f'<tr data-job="{_e(job["job_order_id"])}" data-reason="{_e(job["reason"])}">'
        f'<td class="num">{_e(job["position"])}</td>'
        f"<td>{_job_link(scope, job['job_order_id'])}</td>"
        f'<td class="num">{_e(job["priority"])}</td>'
        f'<td class="text why">{_e(job["why"])}</td></tr>'
        for job in jobs
    ]
    return _table(
        "queue",
        "Queue, in start order",
        ("#", "Job", "Priority", "Waits for"),
        lines,
        "Nothing waiting.",
    )


def _failures(scope: str, jobs: list[Mapping[str, Any]]) -> str:
    lines = [
        f'<tr data-job="{_e(job["job_order_id"])}">'
        f"<td>{_job_link(scope, job['job_order_id'])}</td>"
        f'<td class="state {_e(job["state"].split(".")[0])}">{_e(job["state"])}</td>'
        f'<td class="text bad">{_e(job["error"] or "no reason recorded")}</td>'
        f'<td class="num">{_since(job["at"], ago=True)}</td></tr>'
        for job in jobs
    ]
    return _table(
        "failures",
        "Last failures",
        ("Job", "State", "Why", "When"),
        lines,
        "No failure in the last hour.",
    )


def station_api_url() -> str:
    return "/api/station"


def scope_api_url(scope: str) -> str:
    return "/api/scopes/" + quote(scope, safe="/")
