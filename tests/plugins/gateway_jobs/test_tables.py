"""The CLI's tables at 80 columns: nothing wider, no word broken, the long cut with an ellipsis,
results counted as the MES sees them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from gateway_jobs.tables import (
    job_table,
    jobs_table,
    queue_table,
    results,
    short_state,
    short_time,
    took,
)

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def render(table: Table, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(table)
    return console.export_text().splitlines()


def state(*texts: str) -> list[dict[str, Any]]:
    return [{"StateText": {"Text": text}} for text in texts]


def response(
    job: str, *states: str, data: list[dict[str, Any]] | None = None, ended: str | None = None
) -> dict[str, Any]:
    return {
        "JobOrderID": job,
        "JobState": state(*states),
        "StartTime": "2026-11-28T11:59:01.123Z",
        "EndTime": ended,
        "JobResponseData": data or [],
    }


BOOKKEEPING: list[dict[str, Any]] = [
    {"ID": "RecipeVersion", "Value": "sha256:" + "ab" * 32},
    {"ID": "WorkMasterID", "Value": "WM-AXLE"},
    {"ID": "QueuePosition", "Value": 2},
]
ERROR = "action tighten (step TightenBolts) failed after 3 tries: spindle fault: torque not reached"


def test_the_jobs_list_fits_80_columns_with_whole_states() -> None:
    responses = [
        response("AXLE-0001", "NotAllowedToStart", "Ready", data=BOOKKEEPING),
        response("AXLE-0002", "AllowedToStart", "Ready", data=BOOKKEEPING),
        response("AXLE-0003-WITH-A-VERY-LONG-JOB-ORDER-ID", "Running"),
        response(
            "AXLE-0004",
            "Aborted",
            ended="2026-11-28T11:59:03.2Z",
            data=[
                *BOOKKEEPING,
                {"ID": "tighten", "Value": {"torque": 12}},
                {"ID": "Error", "Value": ERROR},
            ],
        ),
    ]
    lines = render(jobs_table("cell1", responses, {"AXLE-0001": 7, "AXLE-0004": -3}, now=NOW))
    assert max(map(len, lines)) <= 80
    header = next(line for line in lines if line.split()[:2] == ["job", "state"])
    assert header.split() == ["job", "state", "prio", "started", "took", "results", "error"]
    rows = {line.split()[0]: line for line in lines if line.lstrip().startswith("AXLE")}
    assert rows["AXLE-0001"].split()[1:3] == ["NotAllowed.Ready", "7"]
    assert rows["AXLE-0002"].split()[1] == "Allowed.Ready"
    assert "Running" in rows[next(job for job in rows if job.startswith("AXLE-0003"))]
    aborted = rows["AXLE-0004"]
    assert aborted.split()[1:3] == ["Aborted", "-3"]
    assert "  2 s  " in aborted  # how long it ran
    assert aborted.split()[6] == "1"  # one result: the bookkeeping entries are not results
    assert "11:59:01" in aborted  # started today: the time of day is enough
    assert "action tight" in aborted
    assert aborted.rstrip().endswith("…")  # the error, cut to the room left
    assert len(lines) == 5 + 4  # title, blank, header, rule, blank: and one line per job


def test_no_word_is_broken_at_80_columns_however_long() -> None:
    table = jobs_table("cell1", [response("J" * 90, "NotAllowedToStart", "Waiting")], {}, now=NOW)
    lines = render(table)
    assert max(map(len, lines)) <= 80
    row = next(line for line in lines if line.lstrip().startswith("J"))
    assert "NotAllowed.Waiting" in row
    assert "…" in row.split()[0]


def test_the_show_table_fits_and_reads_results_as_key_value() -> None:
    data = [
        *BOOKKEEPING,
        {"ID": "tighten", "Value": {"torque": 86.16, "unit": "Nm", "torque_ok": True}},
        {"ID": "Error", "Value": ERROR},
    ]
    lines = render(job_table("AXLE-0004", response("AXLE-0004", "Aborted", data=data)))
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    assert "torque=86.16, unit=Nm, torque_ok=true" in text
    assert "error" in text
    assert "RecipeVersion" in text


def test_the_queue_table_fits() -> None:
    queue = {
        "Running": [{"JobOrderID": "J1", "Equipment": ["camera", "positioner", "tightener"]}],
        "Waiting": [
            {
                "JobOrderID": f"J{n}",
                "Position": n,
                "Priority": 5,
                "StartTime": "2026-11-29T06:00:00Z",
                "Equipment": ["camera", "positioner", "tightener", "a-very-long-equipment-name"],
            }
            for n in range(2, 5)
        ],
    }
    lines = render(queue_table(queue, now=NOW))
    assert max(map(len, lines)) <= 80
    assert any(line.split()[:2] == ["run", "J1"] for line in lines)
    assert len([line for line in lines if line.lstrip()[:1].isdigit()]) == 3


def test_states_times_and_results_read_short() -> None:
    assert short_state("NotAllowedToStart.Ready") == "NotAllowed.Ready"
    assert short_state("Interrupted.Held") == "Interrupted.Held"
    assert short_time("2026-11-28T07:21:05.5Z", NOW) == "07:21:05"
    assert took("2026-11-28T07:21:05Z", "2026-11-28T07:24:05Z") == "3 min"
    assert took("2026-11-28T07:21:05Z", None) == ""
    assert short_time("2026-11-26T07:21:05Z", NOW) == "11-26 07:21"
    assert short_time(None, NOW) == ""
    assert [e["ID"] for e in results({"JobResponseData": [*BOOKKEEPING, {"ID": "a"}]})] == ["a"]
