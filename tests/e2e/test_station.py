"""The whole station end to end, over real mosquitto and Redis.

The MES stores and starts jobs over MQTT; job management and the SFC engine run on Redis; the
example rear-axle recipe drives the simulated station, whose positioning unit and camera speak
MQTT (the simulator's MQTT equipment driver) while its tightening controller speaks
MessagePack-RPC (connected to the gateway's RPC server, served by the msgpack-rpc driver). The
camera's QA result and the tightener's torque result are ``pull_event``s.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.testing import running, wait_until
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import free_port
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    final_response,
    return_status,
    store_and_start,
    work_master,
)
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_msgpack_rpc import MsgpackRpcBinding
from gateway_sfc.model import DATASCHEMA
from gateway_simulator.links import MqttDeviceLink, RpcDeviceLink
from gateway_simulator.service import SimulatorService
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

REAR_AXLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "examples" / "recipes" / "rear_axle.json").read_text()
)


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str
    rpc_port: int = field(default_factory=free_port)

    def gateway(
        self,
        instance: str = "a",
        *,
        role: str = "all",
        server_port: int | None = None,
        **simulator: str,
    ) -> Gateway:
        """An instance with its RPC server on ``server_port`` (default: the station's) and the
        simulator on: fast devices, seeded, the tightener over RPC; ``simulator`` overrides."""
        settings = fast_devices(f"{self.name}-sim", **{"rpc_devices": "tightener", **simulator})
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance=instance,
            role=role,
            simulator=settings,
            extra={
                "GATEWAY_MSGPACK_RPC_PORT": str(
                    self.rpc_port if server_port is None else server_port
                )
            },
        )
        return Gateway.from_environment(None, environ)

    def remote_tightener(self, instance: str, **simulator: str) -> Gateway:
        """A simulator-only instance running just the tightener, connected over RPC to the
        station's RPC server (another process's, as a separate controller would be)."""
        return self.gateway(
            instance,
            role="simulator",
            server_port=0,  # no RPC server of its own
            positioner="",
            camera="",
            rpc_port=str(self.rpc_port),
            **simulator,
        )

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, "cell1")


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def simulator_of(gateway: Gateway) -> SimulatorService:
    [service] = [s for s in gateway.services if isinstance(s, SimulatorService)]
    return service


def rear_axle(**tighten: Any) -> dict[str, Any]:
    """The example recipe, its ``tighten`` action changed by ``tighten``."""
    actions = [
        {**action, **tighten} if action["name"] == "tighten" else action
        for action in REAR_AXLE["actions"]
    ]
    return {**REAR_AXLE, "actions": actions}


async def start_job(mes: JobsMes, recipe: dict[str, Any], job: str = "J1") -> None:
    await store_and_start(mes, recipe, job, dataschema=DATASCHEMA)


def driver_name(gateway: Gateway, equipment: str) -> str:
    probe = EquipmentCommand("J0:probe:1", "t.v1", equipment, "cell1", "J0", "probe")
    return gateway.equipment.driver_for(probe).name


def rpc_binding(gateway: Gateway) -> MsgpackRpcBinding:
    binding = gateway.binding("msgpack-rpc")
    assert isinstance(binding, MsgpackRpcBinding)
    return binding


# -- one recipe, MQTT and MessagePack-RPC equipment, pull events -------------------------------


async def test_the_rear_axle_recipe_runs_to_completed_on_mqtt_and_rpc_equipment(
    station: Station,
) -> None:
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        links = {link.device.name: type(link) for link in simulator_of(gateway).links}
        assert links == {
            "positioner": MqttDeviceLink,
            "tightener": RpcDeviceLink,
            "camera": MqttDeviceLink,
        }
        assert driver_name(gateway, "positioner") == "simulator"  # MQTT
        assert driver_name(gateway, "camera") == "simulator"
        assert driver_name(gateway, "tightener") == "msgpack-rpc"
        for name in ("positioner", "tightener", "camera"):
            assert (await gateway.equipment.liveness(name)).online
        await start_job(mes, REAR_AXLE)
        response = await final_response(mes)
        tightener = simulator_of(gateway).station.devices["tightener"]
    assert states(response)[:2] == ["Ended", "Completed"]
    data = results(response)
    assert data["position_axle"]["in_position"] is True  # MQTT command and reply
    tighten = data["tighten"]  # RPC command and reply
    assert tighten["setpoint"] == 85.0  # the action's torque_spec "85Nm"
    assert tighten["unit"] == "Nm"
    assert abs(tighten["torque"] - 85.0) <= 85.0 * 0.05
    assert data["verify"] == tighten  # the RPC tightener's torque_result pull event
    assert data["verify"]["torque_ok"] is True
    # The MQTT camera's pull event, for the part the MQTT positioner put in place.
    assert data["camera_qa"] == {"passed": True, "defects": 0, "image": "sim://camera/J1.png"}
    assert (tightener.handled, tightener.repeated) == (1, 0)


# -- an RPC device that vanishes mid-command ---------------------------------------------------


async def tightening_started(simulated: Gateway) -> None:
    tightener = simulator_of(simulated).station.devices["tightener"]
    await wait_until(lambda: tightener.handled == 1)


async def test_an_rpc_device_that_vanishes_mid_command_fails_the_job_as_offline(
    station: Station,
) -> None:
    """The tightener's controller (another process) goes away while tightening: the action
    fails at its timeout saying that the equipment went offline, and the job is aborted."""
    gateway = station.gateway("a", tightener="", rpc_devices="")
    async with running(gateway), station.mes() as mes:
        async with running(station.remote_tightener("b", tighten_seconds="30")) as remote:
            assert rpc_binding(gateway).is_connected("tightener")
            await start_job(mes, rear_axle(timeout_seconds=1, retry={"max_attempts": 1}))
            await tightening_started(remote)
        response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    error = results(response)["Error"]
    assert re.search(
        r"equipment tightener offline: disconnected \(peer disconnected\) \d+\.\d s ago "
        r"\(last heartbeat \d+\.\d s ago\) \(no reply within 1 s\)",
        error,
    ), error


async def test_a_retry_reaches_the_rpc_device_once_it_is_back_and_the_job_completes(
    station: Station,
) -> None:
    gateway = station.gateway("a", tightener="", rpc_devices="")
    retry = {"max_attempts": 4, "backoff_seconds": 0.3}
    async with running(gateway), station.mes() as mes:
        async with running(station.remote_tightener("b", tighten_seconds="30")) as remote:
            await start_job(mes, rear_axle(timeout_seconds=1, retry=retry))
            await tightening_started(remote)
        async with running(station.remote_tightener("c")) as back:
            response = await final_response(mes)
            tightener = simulator_of(back).station.devices["tightener"]
    assert states(response)[:2] == ["Ended", "Completed"]
    data = results(response)
    assert data["tighten"]["setpoint"] == 85.0
    assert data["verify"] == data["tighten"]  # the torque result of the controller that is back
    assert tightener.handled == 1


# -- routing by type: the MicroDCS-format recipe names no equipment ----------------------------

MICRODCS_REAR_AXLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "examples" / "recipes" / "rear_axle_microdcs.json").read_text()
)
STATION_TYPES = {
    "positioner": ["com.example.station.position.v1"],
    "tightener": ["com.example.station.tighten.v1", "com.example.station.torque_result.v1"],
    "camera": ["com.example.station.qa_result.v1"],
}


async def test_the_microdcs_recipe_runs_once_the_station_declares_its_types(
    station: Station,
) -> None:
    """Refused while no equipment declares the recipe's types (the action named); once the
    MES configured the station's equipment with its TypeIds, it runs unchanged, each command
    reaching the device that declared its type, over MQTT and MessagePack-RPC alike."""
    gateway = station.gateway()
    wm = work_master("WM", MICRODCS_REAR_AXLE, dataschema=DATASCHEMA)
    async with running(gateway), station.mes() as mes:
        refused = await mes.configure("workmaster", wm)
        equipment = [
            {"ID": name, "Properties": [{"ID": "TypeIds", "Value": types}]}
            for name, types in STATION_TYPES.items()
        ]
        assert return_status(await mes.configure("equipment", equipment)) == ReturnStatus.NO_ERROR
        await start_job(mes, MICRODCS_REAR_AXLE)
        response = await final_response(mes)
        devices = simulator_of(gateway).station.devices
        handled = {name: devices[name].handled for name in ("positioner", "tightener")}
    assert return_status(refused) == ReturnStatus.INVALID_REQUEST
    assert "action 'position_axle' (com.example.station.position.v1): no equipment of scope " in (
        refused.errormessage or ""
    )
    assert states(response)[:2] == ["Ended", "Completed"]
    data = results(response)
    assert data["position_axle"]["in_position"] is True
    assert data["tighten"]["setpoint"] == 85.0
    assert data["verify"] == data["tighten"]  # the event of the equipment declaring its type
    assert data["camera_qa"]["passed"] is True
    assert handled == {"positioner": 1, "tightener": 1}


# -- an error reply's data ---------------------------------------------------------------------


async def test_the_data_of_an_equipment_error_reply_is_kept_beside_the_error(
    station: Station,
) -> None:
    """The tightener fails (a spindle fault) and says what torque it reached: the Job Response
    of the aborted job has that reading as the action's result, next to the error."""
    gateway = station.gateway(failure_rate="1")
    async with running(gateway), station.mes() as mes:
        await start_job(mes, rear_axle(retry={"max_attempts": 1}))
        response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    data = results(response)
    assert "tightening-failed: spindle fault: torque not reached" in data["Error"]
    tighten = data["tighten"]
    assert tighten["error"] == "tightening-failed"
    assert tighten["unit"] == "Nm"
    assert tighten["setpoint"] == 85.0
    assert 0 < tighten["torque"] < 85.0
