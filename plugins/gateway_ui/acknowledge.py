"""The operator's acknowledgement of an unsafe failure: blocked equipment takes jobs again.

A job whose rollback failed leaves the equipment it touched blocked (``JobControl.block``); the
scope page lists it, with a button per equipment for operators (``ui.operators``). The button
posts to ``/ui/scopes/<scope>/equipment/<id>/acknowledge``, a script to
``/api/scopes/<scope>/equipment/<id>/acknowledge``; job management releases it and traces who
did (``JobControl.acknowledge``), as for the MES's ``config.acknowledgement``.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any
from urllib.parse import quote

from gateway_ui.pages import scope_url


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def blocked_section(scope: str, queue: Mapping[str, Any], *, operators: bool) -> str:
    """The equipment an unsafe failure blocked, why, and (for operators) the buttons that
    acknowledge it; nothing when none is blocked."""
    blocked = queue.get("blocked") or []
    if not blocked:
        return ""
    rows = []
    for item in blocked:
        button = ""
        if operators:
            action = acknowledge_url(scope, item["equipment"])
            button = (
                f'<form method="post" action="{_e(action)}">'
                '<button type="submit">Acknowledge</button></form>'
            )
        rows.append(
            f'<tr data-equipment="{_e(item["equipment"])}"><td>{_e(item["equipment"])}</td>'
            f"<td>{_e(item['reason'])}</td><td>{button}</td></tr>"
        )
    return (
        '<section id="blocked" class="error"><h2>Blocked equipment</h2>'
        "<p>An unsafe failure left it in an unknown state: no queued job starts on it until it "
        "is acknowledged.</p><table><thead><tr><th>Equipment</th><th>Why</th><th></th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def acknowledge_url(scope: str, equipment: str) -> str:
    return f"{scope_url(scope)}/equipment/{quote(equipment, safe='')}/acknowledge"
