"""The HTML of the pages: rendered on the server, complete without script; the script (see
``assets``) keeps them live. Every value from the store is escaped."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import quote

from gateway_ui.assets import CSS

OPERATOR_ACTIONS = ("hold", "resume", "abort")
EDITS = ("insert", "add", "replace", "delete", "reset")  # the step edits an operator may make
# The top-level states in which each action's MES method is allowed (OPC 40001-3 Pause, Resume,
# Abort): the page offers an action only then, and none once the job has ended.
ACTION_STATES = {
    "hold": ("Running",),
    "resume": ("Interrupted",),
    "abort": ("NotAllowedToStart", "AllowedToStart", "Running", "Interrupted"),
}


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _json_script(element_id: str, value: Any) -> str:
    """JSON for the page's script, safe inside a script element."""
    text = json.dumps(value, default=str).replace("<", "\\u003c").replace(">", "\\u003e")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def scope_url(scope: str) -> str:
    return "/ui/scopes/" + quote(scope, safe="/")


def job_url(scope: str, job: str) -> str:
    return scope_url(scope) + "/jobs/" + quote(job, safe="")


def api_job_url(scope: str, job: str) -> str:
    return "/api/scopes/" + quote(scope, safe="/") + "/jobs/" + quote(job, safe="")


def page(
    title: str, crumbs: Iterable[tuple[str, str | None]], body: str, main_attributes: str = ""
) -> str:
    trail = " &rsaquo; ".join(
        f'<a href="{_e(url)}">{_e(name)}</a>' if url else _e(name) for name, url in crumbs
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{CSS}</style></head>
<body><header><a class="brand" href="/ui/">Station gateway</a><span class="crumbs">{trail}</span>
<span id="connection">static</span></header>
<main{main_attributes}>{body}</main>
<script src="/ui/app.js"></script></body></html>
"""


def index_page(scopes: list[dict[str, Any]]) -> str:
    rows = "".join(
        f'<tr data-scope="{_e(row["scope"])}"><td><a href="{_e(scope_url(row["scope"]))}">'
        f"{_e(row['scope'])}</a>{'' if row['online'] else _OFFLINE}</td>"
        f'<td class="num">{row["jobs"]}</td><td>{_e(_counts(row["states"]))}</td></tr>'
        for row in scopes
    )
    empty = '<tr><td colspan="3" class="muted">No scope has had a job yet.</td></tr>'
    body = (
        '<h1>Scopes</h1><table id="scopes"><thead><tr><th>Scope</th><th>Jobs</th>'
        f"<th>By state</th></tr></thead><tbody>{rows or empty}</tbody></table>"
    )
    return page("Scopes", [], body)


_OFFLINE = ' <span class="offline">offline</span>'


def _counts(states: Mapping[str, int]) -> str:
    return ", ".join(f"{state} {count}" for state, count in states.items())


# The scope page lists what runs first, then what waits, then the ended jobs (the newest end
# first), each group highest priority first; the script sorts alike.
_GROUPS = {"Running": 0, "Interrupted": 0, "AllowedToStart": 1, "NotAllowedToStart": 1}


def page_order(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(job: Mapping[str, Any]) -> tuple[int, int]:
        group = _GROUPS.get(job["state"].split(".")[0], 2)
        return group, -job["priority"] if group < 2 else 0

    newest_end_first = sorted(jobs, key=lambda job: job["end_time"] or "", reverse=True)
    return sorted(newest_end_first, key=key)  # stable: ended jobs stay newest first


def scope_page(
    scope: str,
    jobs: list[dict[str, Any]],
    cursor: str,
    queue: Mapping[str, Any],
    *,
    blocked: str = "",
) -> str:
    """``blocked``: the section of equipment an unsafe failure blocked (``acknowledge``)."""
    jobs = page_order(jobs)
    rows = "".join(
        f'<tr data-job="{_e(job["job_order_id"])}">'
        f'<td><a href="{_e(job_url(scope, job["job_order_id"]))}">'
        f"{_e(job['job_order_id'])}</a></td>"
        f'<td class="state {_e(job["state"].split(".")[0])}">{_e(job["state"])}</td>'
        f'<td class="num">{_e(job["priority"])}</td>'
        f'<td class="num" data-stored="{_e(job["stored_at"] or "")}"></td>'
        f"<td>{_e(job['work_master_id'])}</td>"
        f'<td class="mono">{_e((job["recipe_version"] or "")[:19])}</td></tr>'
        for job in jobs
    )
    events = "/api/scopes/" + quote(scope, safe="/") + "/events"
    body = (
        f"<h1>Scope {_e(scope)}</h1>"
        f'<table id="jobs" data-scope-events="{_e(events)}" data-cursor="{_e(cursor)}" '
        f'data-jobs-url="{_e("/api/scopes/" + quote(scope, safe="/") + "/jobs")}" '
        f'data-job-base="{_e(scope_url(scope) + "/jobs/")}">'
        "<thead><tr><th>Job order</th><th>State</th><th>Priority</th><th>Age</th>"
        "<th>Work Master</th><th>Recipe version</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        '<p class="muted">Running first, then waiting (highest priority first), then ended '
        "(the newest first).</p>"
    )
    return page(f"Scope {scope}", [(scope, None)], blocked + queue_section(scope, queue) + body)


def queue_section(scope: str, queue: Mapping[str, Any]) -> str:
    """Online or not, the capacity, the jobs holding a slot, the waiting jobs in order.

    The script re-renders it from ``/api/scopes/<scope>/queue`` (same structure)."""
    if queue["online"]:
        state = '<span class="online">online</span>'
    else:
        reason = f": {_e(queue['reason'])}" if queue["reason"] else ""
        state = f'<span class="offline">offline{reason}</span> (no queued job starts)'
    capacity = queue["capacity"] or "unlimited"
    running = [
        f'<tr><td>running</td><td><a href="{_e(job_url(scope, row["job_order_id"]))}">'
        f"{_e(row['job_order_id'])}</a></td><td></td><td></td>"
        f"<td>{_e(', '.join(row['equipment']))}</td></tr>"
        for row in queue["running"]
    ]
    waiting = [
        f'<tr><td class="num">{_e(row["position"])}</td>'
        f'<td><a href="{_e(job_url(scope, row["job_order_id"]))}">{_e(row["job_order_id"])}'
        f'</a></td><td class="num">{_e(row["priority"])}</td><td>{_e(row["start_time"])}</td>'
        f"<td>{_e(', '.join(row['equipment']))}</td></tr>"
        for row in queue["waiting"]
    ]
    empty = '<tr><td colspan="5" class="muted">Nothing running or waiting.</td></tr>'
    url = "/api/scopes/" + quote(scope, safe="/") + "/queue"
    return (
        f'<section id="queue" data-queue-url="{_e(url)}" data-job-base="'
        f'{_e(scope_url(scope) + "/jobs/")}"><h2>Queue</h2>'
        f'<p id="queue-state">Scope {state}; runs {_e(capacity)} job(s) at once.</p>'
        "<table><thead><tr><th>#</th><th>Job order</th><th>Priority</th><th>Start time</th>"
        f"<th>Equipment</th></tr></thead><tbody>{''.join(running + waiting) or empty}</tbody>"
        "</table></section><h2>Jobs</h2>"
    )


def _paused_before(progress: Mapping[str, Any] | None) -> str:
    """The rest of the breakpoint notice's element: shown when the job is paused at one."""
    step = None if progress is None else progress.get("paused_before")
    return f">Paused at a breakpoint before step {_e(step)}" if step else " hidden>"


def job_page(
    view: Mapping[str, Any],
    chart: str | None,
    trace: list[dict[str, Any]],
    cursor: str,
    *,
    operators: bool,
) -> str:
    scope, job = view["scope"], view["job_order_id"]
    live = {
        "state": view["state"],
        "response": view["response"],
        "progress": view["progress"],
        "server_time": view["server_time"],
    }
    facts = [
        ("State", f'<span id="state" class="state">{_e(view["state"])}</span>'),
        ("Priority", _e(view["priority"])),
        ("Work Master", _e(view["work_master_id"])),
        ("Recipe version", f'<code id="recipe-version">{_e(view["recipe_version"])}</code>'),
        (
            "Stored",
            f"{_e(view['stored_at'])} "
            f'(<span data-stored="{_e(view["stored_at"] or "")}"></span> ago)',
        ),
        ("Started", f'<span id="started">{_e(view["start_time"]) or "&ndash;"}</span>'),
        ("Ended", f'<span id="ended">{_e(view["end_time"]) or "&ndash;"}</span>'),
    ]
    fact_list = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    buttons = ""
    top = str(view["state"]).split(".")[0]
    if operators and top not in ("Ended", "Aborted", "EndState"):
        forms = "".join(
            f'<form method="post" action="{_e(job_url(scope, job))}/actions/{action}" '
            f'data-states="{" ".join(ACTION_STATES[action])}"'
            f"{'' if top in ACTION_STATES[action] else ' hidden'}>"
            f'<button type="submit" name="action" value="{action}">{action.title()}</button></form>'
            for action in OPERATOR_ACTIONS
        )
        forms += (
            f'<form method="post" action="{_e(job_url(scope, job))}/actions/breakpoint">'
            '<input name="step" placeholder="step" required aria-label="step"> '
            '<label><input type="checkbox" name="clear" value="1"> clear</label> '
            '<button type="submit">Breakpoint</button></form>'
            f'<form method="post" action="{_e(job_url(scope, job))}/actions/edit">'
            '<select name="edit" aria-label="edit">'
            + "".join(f"<option>{op}</option>" for op in EDITS)
            + '</select> <input name="step" placeholder="step" aria-label="step"> '
            '<textarea name="new" rows="2" placeholder="new step (JSON)" aria-label="new step">'
            '</textarea> <button type="submit">Edit steps</button></form>'
        )
        buttons = f'<section class="operator" id="operator"><h2>Operator</h2>{forms}</section>'
    drawing = chart or '<p class="muted">This recipe cannot be drawn.</p>'
    body = f"""<h1>Job {_e(job)}</h1>
<div class="columns"><div>
<section class="chart" id="chart">{drawing}</section>
</div><div>
<dl class="facts">{fact_list}</dl>
<div id="error" class="error" hidden></div>
<div id="breakpoint" class="notice"{_paused_before(view["progress"])}</div>
{buttons}
<h2>Active steps</h2>
<table id="active"><thead><tr><th>Step</th><th>Time in step</th></tr></thead><tbody></tbody></table>
<h2>Results</h2>
<table id="results"><thead><tr><th>ID</th><th>Value</th></tr></thead><tbody></tbody></table>
</div></div>
<h2>Actions</h2>
<table id="actions"><thead><tr><th>Action</th><th>Step</th><th>Phase</th><th>Tries</th>
<th>Timeout</th><th>Delegated to</th><th>Result / error</th></tr></thead><tbody></tbody></table>
<h2>Trace</h2>
<table id="trace"><thead><tr><th>Time (UTC)</th><th>Kind</th><th>What</th><th>Latency</th></tr>
</thead><tbody></tbody></table>
{_json_script("initial-live", live)}
{_json_script("initial-trace", trace)}"""
    attributes = (
        f' data-events="{_e(api_job_url(scope, job) + "/events")}" data-cursor="{_e(cursor)}"'
        f' data-scope="{_e(scope)}" data-job="{_e(job)}"'
    )
    return page(f"Job {job}", [(scope, scope_url(scope)), (job, None)], body, attributes)
