"""The JSON API, the trace, live updates and operator actions, against a running gateway with
the simulated station (real Redis, the gateway's HTTP endpoint)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from gateway.recipes import recipe_version
from gateway.testing import poll_until, running
from gateway_ui.trace import position

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"
JOB_API = f"/api/scopes/{SCOPE}/jobs"


async def job_state(station: Station, job: str) -> str:
    return str((await station.get_json(f"{JOB_API}/{job}"))["state"])


async def until_state(station: Station, job: str, prefix: str, timeout: float = 20) -> None:
    with anyio.fail_after(timeout):
        while not (await job_state(station, job)).startswith(prefix):  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def final_trace(station: Station, job: str) -> list[dict[str, Any]]:
    """The trace once the job has ended and the end is recorded in it."""
    await until_state(station, job, "Ended")
    with anyio.fail_after(10):
        while True:
            entries: list[dict[str, Any]] = (await station.get_json(f"{JOB_API}/{job}/trace"))[
                "entries"
            ]
            if any(e["kind"] == "state" and e["current"].startswith("Ended") for e in entries):
                return entries
            await anyio.sleep(0.05)


async def test_the_trace_records_methods_states_steps_commands_replies_and_events(
    station: Station,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        entries = await final_trace(station, "J1")
        job = await station.get_json(f"{JOB_API}/J1")
        listed = await station.get_json(JOB_API)
        scopes = await station.get_json("/api/scopes/")

    kinds = [entry["kind"] for entry in entries]
    assert kinds[0] == "state"
    assert entries[0]["method"] == "StoreAndStart"
    method = next(entry for entry in entries if entry["kind"] == "method")
    assert (method["method"], method["status"]) == ("StoreAndStart", "NO_ERROR")
    assert method["requested_by"] == "MES urn:test:mes"

    steps = [(e["step"], e["active"]) for e in entries if e["kind"] == "step"]
    for step in ("FitAndQa", "Positioning", "TightenBolts", "QaCheck", "VerifyTorque"):
        assert steps.count((step, True)) == 1, step
        assert steps.index((step, True)) < steps.index((step, False)), step
    assert steps.index(("Positioning", False)) < steps.index(("TightenBolts", True))
    assert steps.index(("FitAndQa", False)) < steps.index(("VerifyTorque", True))

    commands = {e["correlation_id"]: e for e in entries if e["kind"] == "command"}
    assert set(commands) == {"J1:position_axle:1", "J1:tighten:1"}
    assert commands["J1:tighten:1"]["equipment"] == "tightener"
    assert commands["J1:tighten:1"]["error"] is None
    replies = {e["correlation_id"]: e for e in entries if e["kind"] == "reply"}
    assert set(replies) == set(commands)
    for reply in replies.values():
        assert reply["error"] is None
        assert reply["latency_ms"] >= 0
        assert kinds.index("reply") > kinds.index("command")
    assert replies["J1:tighten:1"]["data"]["setpoint"] == 85.0
    events = {e["type"] for e in entries if e["kind"] == "event"}
    assert events == {"com.example.station.qa_result.v1", "com.example.station.torque_result.v1"}
    assert [e["current"] for e in entries if e["kind"] == "state"][-1] == "Ended.Completed"
    assert all(e["ts"] > 0 for e in entries)
    assert [e["id"] for e in entries] == sorted((e["id"] for e in entries), key=position)

    version = recipe_version(station.rear_axle)
    assert job["recipe_version"] == version
    data = {entry["ID"]: entry.get("Value") for entry in job["response"]["JobResponseData"]}
    assert data["RecipeVersion"] == version
    assert data["verify"]["torque_ok"] is True
    assert job["state"] == "Ended.Completed"
    assert job["stored_at"] is not None
    assert job["progress"]["status"] in ("finishing", "ended")
    assert job["progress"]["active"] == []
    assert {action["name"]: action["phase"] for action in job["progress"]["actions"]} == {
        "position_axle": "done",
        "tighten": "done",
        "camera_qa": "done",
        "verify": "done",
    }
    assert [row["job_order_id"] for row in listed] == ["J1"]
    assert scopes == [{"scope": SCOPE, "jobs": 1, "states": {"Ended": 1}, "online": True}]


async def test_the_trace_keeps_only_its_newest_entries(station: Station) -> None:
    gateway = station.gateway(GATEWAY_UI_TRACE_MAX_ENTRIES="10", GATEWAY_UI_TRACE_FLUSH_MS="0")
    async with running(gateway), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        await final_trace(station, "J1")
        for _ in range(12):  # refused (the job has ended), each written as it is answered
            await mes.act("Pause", "J1")

        entries: list[dict[str, Any]] = []

        async def cut() -> bool:
            entries[:] = (await station.get_json(f"{JOB_API}/J1/trace"))["entries"]
            return bool(entries[0]["kind"] == "method")

        await poll_until(cut, timeout=10)
    # The newest 10 stream entries (each holding 1 to 10 happenings): the job's own
    # happenings went, the refused calls after them stayed.
    assert len({entry["id"].partition("/")[0] for entry in entries}) <= 10
    assert {entry["method"] for entry in entries} == {"Pause"}
    assert all(entry["status"] != "NO_ERROR" for entry in entries)


async def test_a_reconnecting_stream_resumes_after_its_last_event_without_a_gap(
    station: Station,
) -> None:
    path = f"{JOB_API}/J1/events"
    async with running(station.gateway(seconds=0.3)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        first: list[str] = []
        cursor = None
        async with station.sse(path + "?after=0-0,0-0") as events:
            async for event in events:
                if event.event == "trace":
                    first.append(event.data["id"])
                    cursor = event.id
                if len(first) == 5:
                    break
        assert cursor is not None
        expected = [entry["id"] for entry in await final_trace(station, "J1")]
        second: list[str] = []
        saw_state = False
        with anyio.fail_after(15):
            async with station.sse(path, {"Last-Event-ID": cursor}) as events:
                async for event in events:
                    if event.event == "trace":
                        second.append(event.data["id"])
                    saw_state = saw_state or event.event == "state"
                    if second and second[-1] == expected[-1]:
                        break
    assert first + second == expected
    assert saw_state  # the scope's change stream feeds the same connection


async def test_unknown_jobs_and_scopes_are_404(station: Station) -> None:
    async with running(station.gateway()):
        assert (await station.request(f"{JOB_API}/nope")).status == 404
        assert (await station.request(f"{JOB_API}/nope/trace")).status == 404
        assert (await station.request("/api/scopes/{bad}/jobs")).status == 404
        assert (await station.request(f"/ui/scopes/{SCOPE}/jobs/nope")).status == 404


async def test_pages_render_the_scope_the_jobs_and_the_chart(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        await until_state(station, "J1", "Ended")
        index = (await station.request("/ui/")).body.decode()
        scope = (await station.request(f"/ui/scopes/{SCOPE}")).body.decode()
        page = await station.request(f"/ui/scopes/{SCOPE}/jobs/J1")
        script = await station.request("/ui/app.js")
    assert f'data-scope="{SCOPE}"' in index
    assert 'data-job="J1"' in scope
    assert page.status == 200
    html = page.body.decode()
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="sfc"' in html
    assert 'data-step="TightenBolts"' in html
    assert "<button" not in html  # no operator actions configured
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing external
    assert script.status == 200
    assert script.headers["content-type"].startswith("text/javascript")


async def test_operator_actions_are_off_without_operators(station: Station) -> None:
    async with running(station.gateway(seconds=1)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        await until_state(station, "J1", "Running")
        for path in (f"{JOB_API}/J1/actions/hold", f"/ui/scopes/{SCOPE}/jobs/J1/actions/hold"):
            reply = await station.request(path, "POST", station.basic("alice", "secret"))
            assert reply.status == 403, path
        assert await job_state(station, "J1") == "Running"


async def test_an_operator_holds_resumes_and_aborts_and_the_trace_says_who(
    station: Station,
) -> None:
    settings = {"GATEWAY_UI_OPERATORS": "alice:secret, bob:other"}
    async with running(station.gateway(seconds=1, **settings)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        await until_state(station, "J1", "Running")
        hold = f"{JOB_API}/J1/actions/hold"
        assert (await station.request(hold, "POST")).status == 401
        wrong = await station.request(hold, "POST", station.basic("alice", "other"))
        assert wrong.status == 401
        assert wrong.headers["www-authenticate"].startswith("Basic")
        held = await station.request(hold, "POST", station.basic("alice", "secret"))
        assert held.json() == {"accepted": True, "status": "NO_ERROR", "message": None}
        assert await job_state(station, "J1") == "Interrupted.Suspended"
        again = await station.request(hold, "POST", station.basic("bob", "other"))
        assert again.status == 409
        assert again.json()["status"] == "INVALID_JOB_ORDER_STATUS"
        foreign = await station.request(
            f"/ui/scopes/{SCOPE}/jobs/J1/actions/resume",
            "POST",
            {**station.basic("alice", "secret"), "Origin": "http://elsewhere.example"},
        )
        assert foreign.status == 403
        form = await station.request(
            f"/ui/scopes/{SCOPE}/jobs/J1/actions/resume",
            "POST",
            {**station.basic("bob", "other"), "Origin": f"http://127.0.0.1:{station.port}"},
        )
        assert form.status == 303
        assert form.headers["location"] == f"/ui/scopes/{SCOPE}/jobs/J1"
        abort = f"{JOB_API}/J1/actions/abort"
        aborted = await station.request(abort, "POST", station.basic("alice", "secret"))
        assert aborted.json()["accepted"] is True
        assert await job_state(station, "J1") == "Aborted"
        page = (await station.request(f"/ui/scopes/{SCOPE}/jobs/J1")).body.decode()
        with anyio.fail_after(10):
            while True:
                entries = (await station.get_json(f"{JOB_API}/J1/trace"))["entries"]
                methods = [
                    (e["method"], e["status"], e["requested_by"])
                    for e in entries
                    if e["kind"] == "method"
                ]
                if len(methods) == 5:
                    break
                await anyio.sleep(0.05)
    assert methods == [
        ("StoreAndStart", "NO_ERROR", "MES urn:test:mes"),
        ("Pause", "NO_ERROR", "operator alice"),
        ("Pause", "INVALID_JOB_ORDER_STATUS", "operator bob"),
        ("Resume", "NO_ERROR", "operator bob"),
        ("Abort", "NO_ERROR", "operator alice"),
    ]
    assert page.count("<button") == 0  # an aborted job takes no action any more


async def test_the_scope_page_shows_the_queue_and_the_online_state(station: Station) -> None:
    async with running(station.gateway(seconds=1)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1", "J2")  # one positioner: J2 waits
        await until_state(station, "J1", "Running")
        queue = await station.get_json(f"/api/scopes/{SCOPE}/queue")
        assert [row["job_order_id"] for row in queue["running"]] == ["J1"]
        assert queue["running"][0]["equipment"] == ["camera", "positioner", "tightener"]
        assert [(row["job_order_id"], row["position"]) for row in queue["waiting"]] == [("J2", 1)]
        assert (queue["online"], queue["capacity"]) == (True, 1)
        await mes.configure("online", {"Online": False, "Reason": "maintenance"})
        page = (await station.request(f"/ui/scopes/{SCOPE}")).body.decode()
        index = (await station.request("/ui/")).body.decode()
    assert '<section id="queue"' in page
    assert "offline: maintenance" in page
    assert page.index("J1") < page.index("J2")
    assert '<span class="offline">offline: maintenance</span>' in index


async def test_an_operator_acknowledges_equipment_an_unsafe_failure_blocked(
    station: Station,
) -> None:
    settings = {"GATEWAY_UI_OPERATORS": "alice:secret"}
    async with running(station.gateway(seconds=1, **settings)) as gateway, station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        await until_state(station, "J1", "Running")
        # As the runtime does when a rollback fails (tests/e2e/test_rollback.py end to end).
        await gateway.job_control.block(SCOPE, "J0", ["clamp 1"], "job J0 failed unsafe: jammed")
        page = (await station.request(f"/ui/scopes/{SCOPE}")).body.decode()
        assert "job J0 failed unsafe: jammed" in page
        assert 'action="/ui/scopes/cell1/equipment/clamp%201/acknowledge"' in page
        api = f"/api/scopes/{SCOPE}/equipment/clamp%201/acknowledge"
        assert (await station.request(api, "POST")).status == 401
        form = await station.request(
            f"/ui/scopes/{SCOPE}/equipment/clamp%201/acknowledge",
            "POST",
            {**station.basic("alice", "secret"), "Origin": f"http://127.0.0.1:{station.port}"},
        )
        assert form.status == 303
        assert form.headers["location"] == f"/ui/scopes/{SCOPE}"
        assert (await gateway.job_control.queue(SCOPE)).blocked == {}
        again = await station.request(api, "POST", station.basic("alice", "secret"))
        assert again.json() == {"released": []}  # nothing blocked any more
        page = (await station.request(f"/ui/scopes/{SCOPE}")).body.decode()
    assert "Blocked equipment" not in page
