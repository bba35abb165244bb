"""A fan-out job in the web UI: one timeline lane per member, and the job page's actions grouped
by member (the simulated station with three nutrunners; real mosquitto and Redis)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from gateway.testing import poll_until, running
from gateway_jobs.testing import store_and_start
from gateway_sequence import DATASCHEMA as SEQUENCE

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
TIGHTEN = "com.example.station.tighten.v1"
NUTRUNNERS = {"GATEWAY_SIMULATOR_NUTRUNNERS": "nr1,nr2,nr3", "GATEWAY_SIMULATOR_FAULTS": "nr3"}
# A fan-out over three nutrunners (nr3 fails: two suffice), then a per-member pipeline on two.
RECIPE = {
    "timeout_seconds": 5,
    "steps": [
        {
            "name": "tighten",
            "type_id": TIGHTEN,
            "fan_out": {"members": ["nr1", "nr2", "nr3"], "policy": 2},
        },
        {
            "name": "per_nr",
            "fan_out": {"members": ["nr2", "nr1"]},
            "steps": [
                {"name": "snug", "type_id": TIGHTEN},
                {"name": "final", "type_id": TIGHTEN},
            ],
        },
    ],
}
MEMBER_RUNS = ["tighten@nr1", "tighten@nr2", "tighten@nr3"]
PIPELINE_RUNS = ["snug@nr2", "final@nr2", "snug@nr1", "final@nr1"]


async def ended_with_every_command(station: Station) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job J1 and the timeline, once J1 ended and each of its commands has its answer (the
    job's end may be traced before the last reply)."""
    read: dict[str, dict[str, Any]] = {}

    async def ended() -> bool:
        read["job"] = job = await station.get_json(f"/api/scopes/{SCOPE}/jobs/J1")
        read["timeline"] = timeline = await station.get_json(
            f"/api/scopes/{SCOPE}/timeline?minutes=15"
        )
        closed = [bar for bar in timeline["commands"] if bar["outcome"] in ("ok", "error")]
        return bool(job["state"].startswith("Ended") and len(closed) == 7)

    await poll_until(ended, timeout=20)
    return read["job"], read["timeline"]


def lane_actions(svg: str) -> dict[str, list[str]]:
    """The actions of the command bars in each equipment lane of the timeline's drawing."""
    lanes = re.findall(r'<g class="lane equipment" data-lane="([^"]+)">(.*?)</g>', svg, re.S)
    return {lane: re.findall(r'data-action="([^"]+)"', bars) for lane, bars in lanes}


async def test_each_member_of_a_fan_out_has_its_own_lane_and_row_group(station: Station) -> None:
    async with running(station.gateway(seconds=0.05, **NUTRUNNERS)), station.mes() as mes:
        await store_and_start(mes, RECIPE, "J1", dataschema=SEQUENCE)
        job, timeline = await ended_with_every_command(station)
        page = (await station.request(f"/ui/scopes/{SCOPE}/timeline?minutes=15")).body.decode()
    assert job["state"] == "Ended.Completed"
    # The timeline: each member's commands in the member's own lane, nr3's failure in its own.
    lanes = {(bar["action"], bar["equipment"], bar["outcome"]) for bar in timeline["commands"]}
    assert lanes == {
        ("tighten@nr1", "nr1", "ok"),
        ("tighten@nr2", "nr2", "ok"),
        ("tighten@nr3", "nr3", "error"),
        ("snug@nr1", "nr1", "ok"),
        ("final@nr1", "nr1", "ok"),
        ("snug@nr2", "nr2", "ok"),
        ("final@nr2", "nr2", "ok"),
    }
    drawn = lane_actions(page)
    assert sorted(drawn["nr1"]) == ["final@nr1", "snug@nr1", "tighten@nr1"]
    assert sorted(drawn["nr2"]) == ["final@nr2", "snug@nr2", "tighten@nr2"]
    assert drawn["nr3"] == ["tighten@nr3"]
    # The job page's actions: each fan-out's member runs after it, member by member (in the
    # fan-out's order of members), a pipeline's steps in order, each saying whose they are.
    actions = job["progress"]["actions"]
    assert [action["name"] for action in actions] == [
        "tighten",
        *MEMBER_RUNS,
        "per_nr",
        *PIPELINE_RUNS,
    ]
    groups = [(action["fan_out"], action["member"]) for action in actions]
    assert groups == [
        (None, None),
        ("tighten", "nr1"),
        ("tighten", "nr2"),
        ("tighten", "nr3"),
        (None, None),
        ("per_nr", "nr2"),
        ("per_nr", "nr2"),
        ("per_nr", "nr1"),
        ("per_nr", "nr1"),
    ]
