"""An operator's breakpoint from the web UI on an SFC job (the simulated station, real Redis and
mosquitto): the job pauses before the step, the page and the trace say why, Resume goes on."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest

from gateway.testing import poll_until, running
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import job_order, return_status, work_master
from gateway_sfc.model import DATASCHEMA

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

JOB_API = "/api/scopes/cell1/jobs"
OK = ReturnStatus.NO_ERROR


async def methods(station: Station, count: int) -> list[tuple[str, str, str]]:
    """The job's method calls in its trace, once there are ``count`` of them."""
    found: list[tuple[str, str, str]] = []

    async def traced() -> bool:
        entries: list[dict[str, Any]] = (await station.get_json(f"{JOB_API}/J1/trace"))["entries"]
        found[:] = [
            (e["method"], e["status"], e["requested_by"]) for e in entries if e["kind"] == "method"
        ]
        return len(found) >= count

    await poll_until(traced)
    return found


async def test_an_operator_sets_a_breakpoint_and_the_job_pauses_before_that_step(
    station: Station,
) -> None:
    settings = {"GATEWAY_UI_OPERATORS": "alice:secret"}
    alice = station.basic("alice", "secret")
    action = f"{JOB_API}/J1/actions/breakpoint"
    async with running(station.gateway(seconds=0.05, **settings)), station.mes() as mes:
        wm = work_master("WM", station.rear_axle, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        assert return_status(await mes.store(job_order("J1", work_masters=["WM"]))) == OK
        unknown = await station.request(f"{action}?step=nowhere", "POST", alice)
        no_step = await station.request(action, "POST", alice)
        done = await station.request(f"{action}?step=verify", "POST", alice)
        assert return_status(await mes.act("Start", "J1")) == OK

        async def suspended() -> bool:
            job = await station.get_json(f"{JOB_API}/J1")
            return bool(job["state"] == "Interrupted.Suspended" and job["progress"])

        await poll_until(suspended)
        job = await station.get_json(f"{JOB_API}/J1")
        page = (await station.request("/ui/scopes/cell1/jobs/J1")).body.decode()
        resumed = await station.request(f"{JOB_API}/J1/actions/resume", "POST", alice)
        traced = await methods(station, 6)
    assert (unknown.status, unknown.json()["status"]) == (409, "INVALID_REQUEST")
    assert unknown.json()["message"].startswith("unknown-step: 'nowhere'")
    assert no_step.status == 400
    assert done.json() == {"accepted": True, "status": "NO_ERROR", "message": None}
    assert job["progress"]["paused_before"] == "verify"
    assert job["progress"]["breakpoints"] == ["verify"]
    assert {action["name"] for action in job["progress"]["actions"]} >= {"tighten", "camera_qa"}
    assert "verify" not in {action["name"] for action in job["progress"]["actions"]}
    assert "Paused at a breakpoint before step verify" in page
    assert resumed.json()["accepted"] is True
    assert traced[:4] == [
        ("Store", "NO_ERROR", "MES urn:test:mes"),
        ("SetBreakpoint", "INVALID_REQUEST", "operator alice"),
        ("SetBreakpoint", "NO_ERROR", "operator alice"),
        ("Start", "NO_ERROR", "MES urn:test:mes"),
    ]
    assert traced[4:] == [
        ("Pause", "NO_ERROR", "breakpoint before verify"),
        ("Resume", "NO_ERROR", "operator alice"),
    ]


async def test_an_operator_edits_a_stored_jobs_steps_and_its_recipe_version_follows(
    station: Station,
) -> None:
    settings = {"GATEWAY_UI_OPERATORS": "alice:secret"}
    alice = station.basic("alice", "secret")
    position = {
        "name": "position_again",
        "interaction": "push_command",
        "type_id": "com.example.station.position.v1",
        "equipment": "positioner",
        "timeout_seconds": 30,
    }
    new_step = json.dumps({"name": "Positioning", "actions": [position]})
    action = f"{JOB_API}/J1/actions/edit?edit=replace&step=Positioning&new={quote(new_step)}"
    async with running(station.gateway(seconds=0.05, **settings)), station.mes() as mes:
        wm = work_master("WM", station.rear_axle, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        assert return_status(await mes.store(job_order("J1", work_masters=["WM"]))) == OK
        bad = await station.request(f"{JOB_API}/J1/actions/edit?edit=squash", "POST", alice)
        edited = await station.request(action, "POST", alice)
        assert return_status(await mes.act("Start", "J1")) == OK

        async def ended() -> bool:
            return str((await station.get_json(f"{JOB_API}/J1"))["state"]).startswith("Ended")

        await poll_until(ended)
        job = await station.get_json(f"{JOB_API}/J1")
        traced = await methods(station, 3)
    assert bad.status == 400
    assert edited.json()["accepted"] is True
    version = edited.json()["message"]
    assert job["recipe_version"] == version
    assert "position_again" in {entry["ID"] for entry in job["response"]["JobResponseData"]}
    assert traced[:3] == [
        ("Store", "NO_ERROR", "MES urn:test:mes"),
        ("EditSteps", "NO_ERROR", "operator alice"),
        ("Start", "NO_ERROR", "MES urn:test:mes"),
    ]
