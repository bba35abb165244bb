"""A job through RPC equipment: MES over real MQTT, the SFC engine on real Redis, the tightener
and the camera as ``RpcDevice``s connected to the gateway's RPC server."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand
from gateway.testing import running
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import free_port
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_msgpack_rpc.binding import EquipmentOffline
from gateway_msgpack_rpc.device import RpcDevice
from gateway_msgpack_rpc.testing import rpc_driver
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TIGHTEN = "com.example.station.tighten.v1"
QA_RESULT = "com.example.station.qa_result.v1"
RECIPE: dict[str, Any] = {
    "steps": [{"name": "Tighten", "initial": True}, {"name": "Inspect"}, {"name": "Done"}],
    "transitions": [
        {"source": "Tighten", "target": "Inspect"},
        {"source": "Inspect", "target": "Done"},
    ],
    "actions": [
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": TIGHTEN,
            "equipment": "rpc-tightener",
            "parameters": {"torque_nm": 85},
            "timeout_seconds": 0.5,
            "retry": {"max_attempts": 3, "backoff_seconds": 0.05},
        },
        {
            "name": "inspect",
            "step": "Inspect",
            "interaction": "pull_event",
            "type_id": QA_RESULT,
            "equipment": "rpc-camera",
            "timeout_seconds": 5,
        },
    ],
}


class RpcStation:
    def __init__(self, mqtt_url: str, redis_url: str, name: str) -> None:
        self.name = name
        self.mqtt_url = mqtt_url
        self.port = free_port()
        self.environ = {
            "GATEWAY_PLUGINS_BLOCK": "mqtt-equipment,simulator,publisher",
            "GATEWAY_MQTT_URL": mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": name,
            "GATEWAY_REDIS_URL": redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": name,
            "GATEWAY_GATEWAY_INSTANCE_ID": name,
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_JOBS_TOPIC_PREFIX": name,
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
            "GATEWAY_MSGPACK_RPC_PORT": str(self.port),
            "GATEWAY_MSGPACK_RPC_KNOWN_EQUIPMENT": "rpc-tightener,rpc-camera",
        }

    def gateway(self) -> Gateway:
        return Gateway.from_environment(None, self.environ)

    def device(self, equipment_id: str) -> AbstractAsyncContextManager[RpcDevice]:
        return RpcDevice.connect("127.0.0.1", self.port, equipment_id)

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, "cell1")


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> RpcStation:
    return RpcStation(mqtt_url, redis_url, unique)


async def start_job(mes: JobsMes) -> None:
    wm = work_master("WM-1", RECIPE, dataschema=DATASCHEMA)
    assert return_status(await mes.configure("workmaster", wm)) == ReturnStatus.NO_ERROR
    order = job_order("J1", work_masters=["WM-1"])
    assert return_status(await mes.store(order, method="StoreAndStart")) == ReturnStatus.NO_ERROR


async def ended(mes: JobsMes, timeout: float = 10) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            response: dict[str, Any] = (await mes.job_response("J1")).data["JobResponse"]
            states = [state["StateText"]["Text"] for state in response.get("JobState", [])]
            if {"Ended", "Aborted"} & set(states):
                return response
            await anyio.sleep(0.05)


def summary(response: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    states = [state["StateText"]["Text"] for state in response["JobState"]]
    data = {entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])}
    return states[:2], data


async def test_a_job_runs_to_completed_through_rpc_equipment(station: RpcStation) -> None:
    async with (
        running(station.gateway()),
        station.device("rpc-camera") as camera,
        station.device("rpc-tightener") as tightener,
        station.mes() as mes,
    ):
        await start_job(mes)
        with anyio.fail_after(10):
            command: CloudEvent = await tightener.commands.receive()
        assert command.correlationid == "J1:tighten:1"
        assert command.data["parameters"] == {"torque_nm": 85}
        await tightener.reply(command, {"torque": 85.2})
        await camera.emit(QA_RESULT, {"passed": True}, scope="cell1", job_order_id="J1")
        states, data = summary(await ended(mes))
    assert states == ["Ended", "Completed"]
    assert data["tighten"] == {"torque": 85.2}
    assert data["inspect"] == {"passed": True}


async def test_rpc_replies_and_heartbeats_leave_no_deduplication_marker(
    station: RpcStation,
) -> None:
    """A reply is applied only while its try is outstanding (the engine's compare-and-swap), so
    it is not claimed: a repeated one changes nothing and neither leaves a day-long marker; nor
    do heartbeats. An event (no correlation id) is still claimed."""
    gateway = station.gateway()

    async def markers() -> int:
        assert gateway.store is not None
        client = gateway.store.client
        return len([key async for key in client.scan_iter(match=f"{station.name}:*dedupe*")])

    async with (
        running(gateway),
        station.device("rpc-camera") as camera,
        station.device("rpc-tightener") as tightener,
        station.mes() as mes,
    ):
        await start_job(mes)
        with anyio.fail_after(10):
            command: CloudEvent = await tightener.commands.receive()
        before = await markers()  # the MES's calls'
        assert before > 0
        answer = command.reply(source=tightener.source, data={"torque": 85.2})
        for _ in range(2):  # the same reply twice: the second finds its try answered
            assert await tightener.publish(answer) == []
        for _ in range(5):
            await tightener.heartbeat()
            await camera.heartbeat()
        assert await markers() == before
        await camera.emit(QA_RESULT, {"passed": True}, scope="cell1", job_order_id="J1")
        states, data = summary(await ended(mes))
        assert await markers() == before + 1
    assert states == ["Ended", "Completed"]
    assert data["tighten"] == {"torque": 85.2}


async def test_equipment_that_vanishes_mid_command_gets_the_command_again_when_back(
    station: RpcStation,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        async with station.device("rpc-tightener") as tightener:
            await start_job(mes)
            with anyio.fail_after(10):
                first = await tightener.commands.receive()
            await tightener.abort()  # power lost before answering
        # Back within try 1's timeout, it gets try 1 again (same correlation id: the engine
        # re-sends what equipment that came back may have missed); back later, try 1 has
        # timed out and the engine's retry reaches it with a correlation id of its own.
        answered: list[str] = []
        async with (
            station.device("rpc-tightener") as tightener,
            station.device("rpc-camera") as camera,
            anyio.create_task_group() as tasks,
        ):

            async def answer_every_command() -> None:
                async for command in tightener.commands:
                    answered.append(str(command.correlationid))
                    await tightener.reply(command, {"torque": 84.9})

            tasks.start_soon(answer_every_command)
            await camera.emit(QA_RESULT, {"passed": True}, scope="cell1", job_order_id="J1")
            states, data = summary(await ended(mes))
            tasks.cancel_scope.cancel()
    assert first.correlationid == "J1:tighten:1"
    assert answered
    assert all(c.startswith("J1:tighten:") for c in answered), answered
    assert states == ["Ended", "Completed"]
    assert data["tighten"] == {"torque": 84.9}


def without_retry(timeout_seconds: float = 0.5) -> dict[str, Any]:
    """The recipe with one try of ``tighten``, failing after ``timeout_seconds``."""
    actions = [dict(action) for action in RECIPE["actions"]]
    actions[0].update(timeout_seconds=timeout_seconds, retry={"max_attempts": 1})
    return {**RECIPE, "actions": actions}


async def start(mes: JobsMes, recipe: dict[str, Any]) -> None:
    wm = work_master("WM-1", recipe, dataschema=DATASCHEMA)
    assert return_status(await mes.configure("workmaster", wm)) == ReturnStatus.NO_ERROR
    order = job_order("J1", work_masters=["WM-1"])
    assert return_status(await mes.store(order, method="StoreAndStart")) == ReturnStatus.NO_ERROR


async def test_rpc_equipment_is_online_in_the_shared_hub_and_an_action_after_it_left_fails(
    station: RpcStation,
) -> None:
    gateway = station.gateway()
    hub = gateway.equipment
    async with running(gateway), station.mes() as mes:
        assert await hub.offline_reason("rpc-tightener") == (
            "equipment rpc-tightener offline: never seen (no heartbeat yet)"
        )
        async with station.device("rpc-tightener"):
            assert (await hub.liveness("rpc-tightener")).online  # in Redis: every instance's
        await wait_until_async(lambda: offline(gateway, "rpc-tightener"))
        reason = await hub.offline_reason("rpc-tightener")
        assert reason is not None
        assert reason.startswith("equipment rpc-tightener offline: disconnected (peer discon")
        await start(mes, without_retry())
        states, data = summary(await ended(mes))
    assert states[0] == "Aborted"
    assert "equipment rpc-tightener offline: MessagePack-RPC disconnected" in data["Error"]


async def test_an_action_whose_rpc_equipment_vanishes_mid_command_fails_as_offline(
    station: RpcStation,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        async with station.device("rpc-tightener") as tightener:
            await start(mes, without_retry(0.5))
            with anyio.fail_after(10):
                await tightener.commands.receive()
            await tightener.abort()  # power lost before answering
        states, data = summary(await ended(mes))
    assert states[0] == "Aborted"
    error = data["Error"]
    assert re.search(
        r"equipment rpc-tightener offline: disconnected \(.+\) \d+\.\d s ago "
        r"\(last heartbeat \d+\.\d s ago\) \(no reply within 0\.5 s\)",
        error,
    ), error


async def offline(gateway: Gateway, equipment: str) -> bool:
    return not (await gateway.equipment.liveness(equipment)).online


async def wait_until_async(condition: Callable[[], Awaitable[bool]], timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not await condition():  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def test_an_instance_without_the_connection_says_the_equipment_is_on_another_one(
    station: RpcStation,
) -> None:
    other = Gateway.from_environment(
        None,
        {
            **station.environ,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{station.name}-b",
            "GATEWAY_MSGPACK_RPC_PORT": "0",
        },
    )
    command = EquipmentCommand("J1:tighten:1", TIGHTEN, "rpc-tightener", "cell1", "J1", "tighten")
    async with running(station.gateway()), running(other), station.device("rpc-tightener"):
        assert (await other.equipment.liveness("rpc-tightener")).online  # the shared view
        with pytest.raises(EquipmentOffline, match="connected to another one"):
            await rpc_driver(other).send(command)
