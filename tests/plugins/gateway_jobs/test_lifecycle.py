"""The OPC 40001-3 lifecycle end to end: an MES over MQTT, a gateway on real mosquitto and Redis.

The MES speaks only MQTT (``JobsMes``); the recipe side is the scripted interpreter, which
drives Run / Complete through the plugin's ``JobControl`` like the SFC engine does.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from anyio.abc import ObjectReceiveStream

from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.recipes import JobCommand
from gateway.testing import running, wait_until
from gateway_jobs.events import STATUS_EVENT_TYPE
from gateway_jobs.model import ReturnStatus
from gateway_jobs.processor import CONFIG_TYPES
from gateway_jobs.testing import JobsMes, Station, job_order, return_status, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR


async def next_states(stream: ObjectReceiveStream[MqttMessage], count: int) -> list[str]:
    """The state paths of the next ``count`` status events."""
    states = []
    with anyio.fail_after(5):
        for _ in range(count):
            event = from_mqtt(await stream.receive())
            assert event.type == STATUS_EVENT_TYPE
            states.append(".".join(entry["StateText"]["Text"] for entry in event.data["JobState"]))
    return states


async def configure(mes: JobsMes, recipe: Any = None) -> None:
    reply = await mes.configure("workmaster", work_master("wm", recipe))
    assert return_status(reply) == OK, reply.errormessage


async def test_store_start_run_pause_resume_stop_clear(station: Station) -> None:
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes, mes.events() as events:
        await configure(mes)
        steps = [
            ("Store", await mes.store(job_order("j1", priority=5))),
            ("Start", await mes.act("Start", "j1")),
        ]
        assert await next_states(events, 3) == [
            "NotAllowedToStart.Ready",
            "AllowedToStart.Ready",
            "Running",  # the interpreter was started and reported Run
        ]
        for method in ("Pause", "Resume", "Stop"):
            steps.append((method, await mes.act(method, "j1")))
        assert await next_states(events, 3) == ["Interrupted.Suspended", "Running", "Ended.Closed"]
        response = await mes.job_response("j1")
        steps.append(("Clear", await mes.act("Clear", "j1")))
        assert await next_states(events, 1) == ["EndState"]
        after_clear = await mes.job_response("j1")

    for method, reply in steps:
        assert return_status(reply) == OK, (method, reply.errormessage)
        assert reply.errormessage is None
    assert return_status(response) == OK
    job_response = response.data["JobResponse"]
    assert job_response["JobOrderID"] == "j1"
    assert [entry["StateText"]["Text"] for entry in job_response["JobState"]] == ["Ended", "Closed"]
    assert job_response["StartTime"] <= job_response["EndTime"]
    assert return_status(after_clear) == ReturnStatus.UNKNOWN_JOB_ORDER_ID
    interpreter = station.plugin.interpreters[0]
    assert interpreter.started == ["j1"]
    assert interpreter.commands == [
        ("j1", JobCommand.PAUSE),
        ("j1", JobCommand.RESUME),
        ("j1", JobCommand.STOP),
    ]


async def test_completed_job_carries_its_results_in_the_event_and_the_response(
    station: Station,
) -> None:
    recipe = {"run": True, "complete": {"torque": 41.5, "serial": "SN-7"}}
    async with running(station.gateway()), station.mes() as mes, mes.events() as events:
        await configure(mes, recipe)
        reply = await mes.store(job_order("j2"), "StoreAndStart")
        assert await next_states(events, 3) == [
            "AllowedToStart.Ready",
            "Running",
            "Ended.Completed",
        ]
        response = await mes.job_response("j2")
        by_state = await mes.call(
            "RequestJobResponseByJobOrderState",
            {"JobOrderState": [{"StateText": {"Text": "Ended"}}]},
        )
    assert return_status(reply) == OK
    data = response.data["JobResponse"]["JobResponseData"]
    values = {entry["ID"]: entry["Value"] for entry in data}
    assert values.pop("RecipeVersion").startswith("sha256:")  # which recipe made the results
    assert values.pop("WorkMasterID") == "wm"  # of which Work Master
    assert values == {"torque": 41.5, "serial": "SN-7"}
    assert return_status(by_state) == OK
    assert [item["JobOrderID"] for item in by_state.data["JobResponses"]] == ["j2"]


async def test_status_event_names_its_cause_without_correlation_data(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes, mes.events() as events:
        await configure(mes)
        await mes.call("Store", {"JobOrder": job_order("j3")}, correlationid="order-77")
        with anyio.fail_after(5):
            message = await events.receive()
    event = from_mqtt(message)
    # Named as a user property, never as Correlation Data: an MES that matches replies on
    # Correlation Data must not take the event for the Store reply.
    assert message.correlation_data is None
    assert ("correlationid", "order-77") in message.user_properties
    assert event.correlationid == "order-77"
    assert event.causationid is not None
    assert event.subject == "cell1"
    assert event.data["JobOrder"]["JobOrderID"] == "j3"
    assert "JobResponse" not in event.data  # not final yet


async def test_metadata_is_retained_for_late_subscribers(station: Station) -> None:
    async with (
        running(station.gateway()),
        station.mes() as mes,
        mes.client.watch(f"{station.topic_prefix}/metadata") as stream,
    ):
        with anyio.fail_after(5):
            message = await stream.receive()
    assert message.retain
    attributes = dict(from_mqtt(message).data["additionalAttributes"])
    assert "StoreAndStart" in attributes["supported_commands"]
    assert "RequestJobResponseByJobOrderState" in attributes["supported_commands"]
    assert set(attributes["configuration_types"]) == set(CONFIG_TYPES)
    assert any(kind.endswith(".config.workmaster.v1") for kind in CONFIG_TYPES)
    assert attributes["topics"]["commands"] == f"{station.topic_prefix}/{{scope}}/commands"


async def test_observers_hear_every_stored_transition(station: Station) -> None:
    heard: list[tuple[str, str, str]] = []

    class Audit:
        from gateway.hookspecs import hookimpl

        @hookimpl
        def gateway_job_state_changed(
            self, scope: str, job_order_id: str, method: str, previous: str, current: str
        ) -> None:
            heard.append((method, previous, current))

    gateway = station.gateway()
    gateway.plugins.register(Audit(), name="audit")
    async with running(gateway), station.mes() as mes:
        await configure(mes)
        await mes.store(job_order("j4"))
        await mes.act("Cancel", "j4")
        await wait_until(lambda: len(heard) == 2)
    assert heard == [
        ("Store", "InitialState", "NotAllowedToStart.Ready"),
        ("Cancel", "NotAllowedToStart.Ready", "EndState"),
    ]
