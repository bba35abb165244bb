"""The order of the scope page's jobs: what runs, what waits, what ended."""

from __future__ import annotations

from typing import Any

from gateway_ui.pages import page_order


def job(name: str, state: str, priority: int = 0, end: str | None = None) -> dict[str, Any]:
    return {"job_order_id": name, "state": state, "priority": priority, "end_time": end}


def test_running_first_then_waiting_by_priority_then_ended_newest_first() -> None:
    jobs = [
        job("old", "Ended.Completed", 9, "2026-11-28T01:00:00Z"),
        job("low", "AllowedToStart.Ready", 1),
        job("new", "Aborted", 0, "2026-11-28T02:00:00Z"),
        job("run", "Running", 0),
        job("high", "AllowedToStart.Ready", 5),
        job("held", "Interrupted.Held", 3),
    ]
    assert [j["job_order_id"] for j in page_order(jobs)] == [
        "held",
        "run",
        "high",
        "low",
        "new",
        "old",
    ]
