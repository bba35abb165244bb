"""The simulated station end to end: real mosquitto and Redis, the MES over MQTT, job management,
the SFC engine, the simulator's MQTT driver, and the simulated devices on their own clients."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import JSON, CloudEvent
from gateway.codecs.mqtt import from_mqtt
from gateway.errors import SettingsError
from gateway.testing import running
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_mqtt_equipment import EQUIPMENT, JOB_ORDER, EquipmentTopics, MqttEquipmentDriver
from gateway_sfc.model import DATASCHEMA
from gateway_simulator.service import SimulatorService
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

REAR_AXLE = json.loads(
    (Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json").read_text()
)
TIGHTEN = "com.example.station.tighten.v1"
TORQUE_RESULT = "com.example.station.torque_result.v1"


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str

    @property
    def topics(self) -> EquipmentTopics:
        return EquipmentTopics(f"{self.name}-sim")

    def gateway(self, instance: str = "a", role: str = "all", **simulator: str) -> Gateway:
        """An instance with the simulator on (fast devices, seeded); ``simulator`` overrides."""
        # The camera is slower than the tightener, so the torque result is in before the
        # chart waits for it: an event arriving just as a job starts waiting for it can be
        # lost by the engine today (a race in gateway_sfc's unclaimed events, reported).
        settings = fast_devices(
            self.topics.prefix, tighten_seconds="0.02", inspect_seconds="0.3", **simulator
        )
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance=instance,
            role=role,
            simulator=settings,
        )
        return Gateway.from_environment(None, environ)

    @asynccontextmanager
    async def mes(self, scope: str = "cell1") -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, scope)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def simulator_of(gateway: Gateway) -> SimulatorService:
    [service] = [s for s in gateway.services if isinstance(s, SimulatorService)]
    return service


async def start_jobs(mes: JobsMes, recipe: Any, *jobs: str) -> None:
    configured = await mes.configure("workmaster", work_master("WM", recipe, dataschema=DATASCHEMA))
    assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
    for job in jobs:
        stored = await mes.store(job_order(job, work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == ReturnStatus.NO_ERROR


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not await condition():  # noqa: ASYNC110
            await anyio.sleep(0.02)


# -- the example recipe against the simulated station ---------------------------------------


async def test_the_rear_axle_recipe_runs_against_the_simulator_to_completed(
    station: Station,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await start_jobs(mes, REAR_AXLE, "J1")
        response = await final_response(mes, "J1")
    assert states(response)[:2] == ["Ended", "Completed"]
    data = results(response)
    assert data["position_axle"]["in_position"] is True
    tighten = data["tighten"]
    assert tighten["setpoint"] == 85.0  # the action's torque_spec "85Nm"
    assert abs(tighten["torque"] - 85.0) <= 85.0 * 0.05
    assert data["verify"] == tighten  # the torque_result event of the same tightening
    assert data["verify"]["torque_ok"] is True
    assert data["camera_qa"] == {"passed": True, "defects": 0, "image": "sim://camera/J1.png"}


async def test_jobs_run_concurrently_on_two_instances_and_each_gets_its_own_results(
    station: Station,
) -> None:
    """Instance a has no simulator (role gateway); b runs it. Any instance drives any device."""
    jobs = [f"J{n}" for n in range(1, 5)]
    async with (
        running(station.gateway("a", role="gateway")),
        running(station.gateway("b")),
        station.mes() as mes,
    ):
        await start_jobs(mes, REAR_AXLE, *jobs)
        responses = {job: await final_response(mes, job) for job in jobs}
    for job, response in responses.items():
        assert states(response)[:2] == ["Ended", "Completed"], (job, response)
        assert results(response)["camera_qa"]["image"] == f"sim://camera/{job}.png"
        assert results(response)["verify"] == results(response)["tighten"]


async def test_a_torque_out_of_tolerance_sends_the_part_to_rejected(station: Station) -> None:
    gateway = station.gateway(torque_noise="5", torque_tolerance_percent="0")
    async with running(gateway), station.mes() as mes:
        await start_jobs(mes, REAR_AXLE, "J1")
        response = await final_response(mes, "J1")
    assert states(response)[:2] == ["Ended", "Completed"]  # Rejected is the chart's own end
    assert results(response)["verify"]["torque_ok"] is False


async def test_a_tightening_fault_aborts_the_job_with_the_controllers_error(
    station: Station,
) -> None:
    async with running(station.gateway(failure_rate="1")), station.mes() as mes:
        await start_jobs(mes, REAR_AXLE, "J1")
        response = await final_response(mes, "J1")
    assert states(response)[0] == "Aborted"
    assert "tightening-failed: spindle fault: torque not reached" in results(response)["Error"]


# -- idempotency over the wire -------------------------------------------------------------


async def test_a_repeated_correlation_id_is_answered_the_same_and_done_once(
    station: Station,
) -> None:
    gateway = station.gateway()
    command = CloudEvent(
        type=TIGHTEN,
        source="urn:test:engine",
        subject="cell1",
        datacontenttype=JSON,
        data={"parameters": {"torque_spec": "60 Nm"}, "job_parameters": {}},
        correlationid="J9:tighten:1",
        extensions={EQUIPMENT: "tightener", JOB_ORDER: "J9"},
    )
    topic = station.topics.commands("tightener")
    async with (
        running(gateway),
        connect_test_client(station.mqtt_url) as engine,
        engine.watch(station.topics.events("tightener")) as events,
    ):
        first = await engine.request(topic, command)
        again = await engine.request(topic, command.replace(id="another-delivery"))
        with anyio.move_on_after(0.3):
            async for message in events:
                assert from_mqtt(message).type == TORQUE_RESULT
                assert from_mqtt(message).extensions[JOB_ORDER] == "J9"
                break
        with anyio.move_on_after(0.3) as quiet:
            await events.receive()
    assert quiet.cancelled_caught  # one torque result, not two
    assert first.data == again.data
    assert first.data["setpoint"] == 60.0
    assert first.correlationid == again.correlationid == "J9:tighten:1"
    tightener = simulator_of(gateway).station.devices["tightener"]
    assert (tightener.handled, tightener.repeated) == (1, 1)


async def test_an_unknown_command_is_answered_with_an_error(station: Station) -> None:
    command = CloudEvent(
        type="com.example.station.weld.v1", source="urn:test:engine", correlationid="J1:weld:1"
    )
    async with running(station.gateway()), connect_test_client(station.mqtt_url) as engine:
        reply = await engine.request(station.topics.commands("positioner"), command)
    assert reply.errorcode == "unknown-command"
    assert "weld" in (reply.errormessage or "")


# -- liveness ------------------------------------------------------------------------------


async def test_the_devices_heartbeats_keep_them_online_and_their_goodbye_takes_them_offline(
    station: Station,
) -> None:
    watcher = station.gateway("a", role="gateway")
    hub = watcher.equipment
    async with running(watcher):
        async with running(station.gateway("b", role="simulator")):
            for name in ("positioner", "tightener", "camera"):
                await eventually(partial(online, hub, name))
            # Past several heartbeat timeouts (0.6 s) the device is still seen, and online: its
            # heartbeats, not its first message, keep it so. Both read at once, not after a
            # sleep: a loaded machine may delay one heartbeat past the timeout.
            since = time.time()
            await eventually(partial(heartbeats_seen_after, hub, "tightener", since + 1.2))
        await eventually(lambda: offline(hub, "tightener"))
        reason = await hub.offline_reason("tightener")
    assert reason is not None
    assert reason.startswith("equipment tightener offline: disconnected (shut down) 0.")


async def test_a_device_that_vanishes_is_offline_through_its_will(station: Station) -> None:
    watcher = station.gateway("a", role="gateway")
    simulated = station.gateway("b", role="simulator")
    hub = watcher.equipment
    async with running(watcher), running(simulated):
        await eventually(lambda: online(hub, "camera"))
        [camera] = [link for link in simulator_of(simulated).links if link.device.name == "camera"]
        client = getattr(camera, "_client", None)
        assert client is not None
        # The connection breaks without a DISCONNECT (no goodbye): the broker sends the will.
        client._client.socket().shutdown(socket.SHUT_RDWR)
        await eventually(lambda: offline(hub, "camera"))
        state = await hub.liveness("camera")
        assert state.gone_reason == "disconnected (connection lost)"  # the will, at once
        await eventually(lambda: online(hub, "camera"))  # the device reconnects


async def online(hub: Any, name: str) -> bool:
    return bool((await hub.liveness(name)).online)


async def offline(hub: Any, name: str) -> bool:
    return not await online(hub, name)


async def heartbeats_seen_after(hub: Any, name: str, moment: float) -> bool:
    """Online on a heartbeat received after ``moment`` (wall-clock, as liveness keeps it)."""
    state = await hub.liveness(name)
    return bool(state.online and state.last_seen is not None and state.last_seen > moment)


# -- configuration -------------------------------------------------------------------------


def test_the_simulator_is_off_unless_enabled(station: Station) -> None:
    gateway = station.gateway(enabled="false")
    assert not [s for s in gateway.services if isinstance(s, SimulatorService)]
    assert not [d for d in gateway.equipment.drivers if d.name == "simulator"]


def test_every_instance_drives_the_simulator_but_only_its_role_runs_the_devices(
    station: Station,
) -> None:
    gateway = station.gateway(role="gateway")
    [driver] = [d for d in gateway.equipment.drivers if d.name == "simulator"]
    assert isinstance(driver, MqttEquipmentDriver)
    assert driver.equipment == {"positioner", "tightener", "camera"}
    assert driver.heartbeat_timeout_seconds == pytest.approx(0.6)
    assert not [s for s in gateway.services_for_role() if isinstance(s, SimulatorService)]
    simulator_only = station.gateway(role="simulator")
    assert [s.name for s in simulator_only.services_for_role()] == ["simulator"]


def test_a_bad_simulator_setting_stops_start_up(station: Station) -> None:
    with pytest.raises(SettingsError, match="failure_rate"):
        station.gateway(failure_rate="2")
