"""The station dashboard and the timeline through their JSON API and pages, against a running
gateway with the simulated station (real mosquitto and Redis)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from gateway.testing import running
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import job_order, return_status

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


async def scope_view(station: Station) -> dict[str, Any]:
    station_view = await station.get_json("/api/station/")
    return next(s for s in station_view["scopes"] if s["scope"] == SCOPE)


async def until_scope(station: Station, check: Any, timeout: float = 20) -> dict[str, Any]:
    """The scope's dashboard data once ``check`` holds for it."""
    with anyio.fail_after(timeout):
        while True:
            view = await scope_view(station)
            if check(view):
                return view
            await anyio.sleep(0.05)


async def test_the_dashboard_says_what_runs_what_waits_and_why(station: Station) -> None:
    async with running(station.gateway(seconds=1)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1", "J2")  # capacity 1: J2 waits
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        stored = await mes.store(
            job_order("J3", work_masters=["WM"], StartTime=later, Priority=9),
            method="StoreAndStart",
        )
        assert return_status(stored) == ReturnStatus.NO_ERROR
        view = await until_scope(
            station,
            lambda v: (
                v["running"] and v["running"][0]["steps"] and any(e["busy"] for e in v["equipment"])
            ),
        )
        page = (await station.request("/ui/")).body.decode()
    assert view["online"] is True
    (job,) = view["running"]
    assert job["job_order_id"] == "J1"
    assert job["state"] == "Running"
    assert job["started_at"] <= time.time()
    assert {step["name"] for step in job["steps"]} <= {"Positioning", "TightenBolts", "QaCheck"}
    waits = {row["job_order_id"]: (row["reason"], row["why"]) for row in view["queue"]}
    assert waits["J3"][0] == "start_time"  # first by priority, but not before its StartTime
    assert waits["J2"] == ("capacity", "capacity: 1 of 1 running")
    assert [row["job_order_id"] for row in view["queue"]] == ["J3", "J2"]
    equipment = {row["equipment"]: row for row in view["equipment"]}
    assert {"positioner", "tightener", "camera"} <= set(equipment)
    busy = [row["busy"] for row in equipment.values() if row["busy"]]
    assert busy[0]["job_order_id"] == "J1"
    assert busy[0]["action"] in ("position_axle", "tighten")
    assert all(row["online"] for row in equipment.values())
    # The page as served holds the same, rendered.
    assert 'data-job="J2" data-reason="capacity"' in page
    assert 'data-equipment="positioner" data-online="true"' in page


async def test_the_dashboard_shows_a_failure_with_its_reason_and_the_equipment_error(
    station: Station,
) -> None:
    failing = {"GATEWAY_SIMULATOR_FAILURE_RATE": "1"}
    async with running(station.gateway(seconds=0.05, **failing)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        # The job's state and its trace (the reply's error) are written apart: wait for both.
        view = await until_scope(
            station,
            lambda v: (
                v["failures"]
                and any(e["last_error"] for e in v["equipment"] if e["equipment"] == "tightener")
            ),
        )
    (failure,) = view["failures"]
    assert failure["job_order_id"] == "J1"
    assert failure["error"]  # the engine's reason, as the job page shows it
    assert "tighten" in failure["error"]
    tightener = next(row for row in view["equipment"] if row["equipment"] == "tightener")
    assert tightener["last_error"]["action"] == "tighten"
    assert tightener["last_error"]["job_order_id"] == "J1"


async def test_an_equipment_going_offline_shows_on_the_dashboard(station: Station) -> None:
    gateway = station.gateway(seconds=0.05, GATEWAY_SIMULATOR_HEARTBEAT_SECONDS="30")
    async with running(gateway), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        await until_scope(
            station, lambda v: v["equipment"] and all(e["online"] for e in v["equipment"])
        )
        await gateway.equipment.gone("camera", "cable pulled")
        view = await until_scope(
            station, lambda v: any(e["online"] is False for e in v["equipment"])
        )
    camera = next(row for row in view["equipment"] if row["equipment"] == "camera")
    assert camera["online"] is False
    assert "cable pulled" in camera["offline_reason"]


async def test_the_timeline_has_a_bar_per_command_in_its_lane_and_statistics(
    station: Station,
) -> None:
    async with running(station.gateway(seconds=0.05)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1", "J2")
        with anyio.fail_after(30):
            while True:
                timeline = await station.get_json(f"/api/scopes/{SCOPE}/timeline?minutes=15")
                ended = [job for job in timeline["jobs"] if job["state"] == "Ended.Completed"]
                done = [bar for bar in timeline["commands"] if bar["outcome"] == "ok"]
                if len(ended) == 2 and len(done) == 4:
                    break
                await anyio.sleep(0.05)
        page = (await station.request(f"/ui/scopes/{SCOPE}/timeline?minutes=15")).body.decode()
        bad = [
            (await station.request(f"/api/scopes/{SCOPE}/timeline?{query}")).status
            for query in ("minutes=nope", "minutes=0", "end=inf", "end=nan")
        ]
    lanes = {(bar["job_order_id"], bar["action"]): bar["equipment"] for bar in timeline["commands"]}
    assert lanes == {
        ("J1", "position_axle"): "positioner",
        ("J1", "tighten"): "tightener",
        ("J2", "position_axle"): "positioner",
        ("J2", "tighten"): "tightener",
    }
    for bar in timeline["commands"]:
        assert bar["end"] >= bar["start"]
        assert bar["seconds"] == pytest.approx(bar["end"] - bar["start"])
    stats = {row["type"]: row for row in timeline["stats"]}
    tighten = stats["com.example.station.tighten.v1"]
    assert tighten["count"] == 2
    assert tighten["actions"] == ["tighten"]
    assert 0 < tighten["p50_seconds"] <= tighten["p95_seconds"] <= tighten["max_seconds"]
    states = [segment["state"] for segment in ended[0]["segments"]]
    assert states[-2:] == ["Running", "Ended.Completed"]
    assert page.count('class="bar command ok"') == 4
    assert page.count('<g class="lane job"') == 2
    assert 'data-type="com.example.station.tighten.v1"' in page  # the statistics beside it
    assert bad == [400, 400, 400, 400]
