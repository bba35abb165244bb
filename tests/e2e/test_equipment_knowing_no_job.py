"""Equipment that knows no job ids, end to end (issue 36), over real mosquitto and Redis.

The rear-axle recipe: the tightener answers its command and reports its torque result naming
no job (no ``subject``, no ``joborderid``); the camera reports its QA result likewise after
positioning. VerifyTorque, which waits for the torque result, follows the join of the
tightening and QA branches, so it activates only once both are done. The torque result is sent
before that (forced: from the tightener's command, before its reply), at that moment (with the
QA result that activates it) and after it; the job completes every time. A torque result from
the tightener while no job holds it is no job's: kept, it would reject the next axle.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.hookspecs import hookimpl
from gateway.testing import poll_until, running, wait_until
from gateway.testing.equipment import NoAnswer, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway.testing.redis_ha import redis_client
from gateway.testing.services import free_port
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from gateway_sfc.model import DATASCHEMA
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

RECIPE = json.loads((Path(__file__).parents[2] / "examples/recipes/rear_axle.json").read_text())
TYPES = "com.example.station"
POSITION, TIGHTEN = f"{TYPES}.position.v1", f"{TYPES}.tighten.v1"
QA_RESULT, TORQUE_RESULT = f"{TYPES}.qa_result.v1", f"{TYPES}.torque_result.v1"
TORQUE = {"torque": 85.2, "torque_ok": True}
QA = {"passed": True, "defects": 0}
OK = ReturnStatus.NO_ERROR


@dataclass
class Steps:
    """One instance's view of the steps it moved (``gateway_step_changed`` fires there)."""

    entered: set[str] = field(default_factory=set)
    left: set[str] = field(default_factory=set)

    @hookimpl
    def gateway_step_changed(self, scope: str, job_order_id: str, step: str, active: bool) -> None:
        (self.entered if active else self.left).add(step)


@dataclass
class Instance:
    gateway: Gateway
    steps: Steps

    async def reply(self, command: EquipmentCommand, data: Any) -> None:
        reply = EquipmentReply(command.correlation_id, data=data, scope=command.scope)
        await self.gateway.equipment.reply(reply)

    async def report(self, type_id: str, data: Any, equipment: str) -> None:
        """An event as equipment that knows no job sends it: neither job nor scope."""
        event_id = str(uuid.uuid4())
        event = EquipmentEvent(type_id, event_id, equipment=equipment, data=data)
        await self.gateway.equipment.event(event)


class Station:
    def __init__(self, mqtt_url: str, redis_url: str, name: str) -> None:
        self.mqtt_url, self.redis_url, self.name = mqtt_url, redis_url, name
        self.equipment = TestEquipment()

    def instance(self, instance: str) -> Instance:
        gateway = station_with(
            self.equipment,
            self.mqtt_url,
            self.redis_url,
            self.name,
            GATEWAY_GATEWAY_INSTANCE_ID=f"{self.name}-{instance}",
        )
        steps = Steps()
        gateway.plugins.register(steps, name="steps")
        return Instance(gateway, steps)

    def answer(self, behaviours: dict[str, Callable[[EquipmentCommand], Any]]) -> None:
        """Each command handled by ``behaviours``, which answer through the hub they choose."""

        async def silent_after(command: EquipmentCommand) -> Any:
            await behaviours[command.type](command)
            raise NoAnswer  # answered above

        self.equipment.behaviours = dict.fromkeys(behaviours, silent_after)

    async def kept(self) -> list[dict[str, Any]]:
        """The events kept for a step that does not wait for them yet."""
        async with redis_client(self.redis_url) as redis:
            kept = await redis.lrange(f"{self.name}:{{cell1}}:rt:unclaimed", 0, -1)
        return [json.loads(text) for text in kept]

    async def run_axle(self, job: str = "J1") -> dict[str, Any]:
        """Store and start the rear-axle job over MQTT; its Job Response once it ended."""
        async with connect_test_client(self.mqtt_url) as client:
            mes = JobsMes(client, self.name, "cell1")
            wm = work_master("WM-AXLE", RECIPE, dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == OK
            order = job_order(job, work_masters=["WM-AXLE"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == OK
            return await final_response(mes, job)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def completed_with_torque(response: dict[str, Any]) -> None:
    assert state_of(response)[:2] == ["Ended", "Completed"], response
    data = data_of(response)
    assert (data["verify"], data["camera_qa"]) == (TORQUE, QA)


async def test_a_torque_result_naming_no_job_is_taken_before_at_and_after_its_step_activates(
    station: Station,
) -> None:
    one = station.instance("a")
    case = {"when": ""}
    kept_early: list[list[dict[str, Any]]] = []

    async def position(command: EquipmentCommand) -> None:
        await one.reply(command, {"position": "fitting"})
        if case["when"] != "at":  # "at": the QA result that activates VerifyTorque comes with it
            await one.report(QA_RESULT, QA, "camera")

    async def tighten(command: EquipmentCommand) -> None:
        if case["when"] == "before":  # before its reply: VerifyTorque cannot be active yet
            await one.report(TORQUE_RESULT, TORQUE, "tightener")
            kept_early.append(await station.kept())
        await one.reply(command, {"torque": 85.2, "unit": "Nm"})

    station.answer({POSITION: position, TIGHTEN: tighten})
    async with running(one.gateway):
        for number, when in enumerate(("before", "at", "after")):
            case["when"] = when
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(torque_result_when, when, one)
                response = await station.run_axle(f"J{number}")
            completed_with_torque(response)
            # The job ended and holds the tightener no more: a result it reports now is no
            # job's. Kept, the next job would take it and reject its axle.
            await one.report(TORQUE_RESULT, {"torque": 12.0, "torque_ok": False}, "tightener")
            await poll_until(lambda: _nothing_kept(station))
            one.steps.entered.clear()
            one.steps.left.clear()
        assert dropped(one.gateway, "not_held") == 3
    [[kept]] = kept_early  # the early one was kept for the job holding the tightener
    assert (kept["job_order_id"], kept["type"]) == ("J0", TORQUE_RESULT)


def dropped(gateway: Gateway, reason: str) -> float:
    name, labels = "gateway_equipment_events_dropped_total", {"reason": reason}
    return gateway.metrics.registry.get_sample_value(name, labels) or 0.0


async def torque_result_when(when: str, one: Instance) -> None:
    """The test's side of the "at" and "after" cases (the "before" case is the tightener's)."""
    if when == "at":  # once tightened, the QA result and the torque result at the same time
        await wait_until(lambda: "TightenBolts" in one.steps.left)
        async with anyio.create_task_group() as both:
            both.start_soon(one.report, QA_RESULT, QA, "camera")
            both.start_soon(one.report, TORQUE_RESULT, TORQUE, "tightener")
    elif when == "after":
        await wait_until(lambda: "VerifyTorque" in one.steps.entered)
        await one.report(TORQUE_RESULT, TORQUE, "tightener")


async def _nothing_kept(station: Station) -> bool:
    return await station.kept() == []


async def test_an_early_event_received_by_one_instance_is_taken_by_a_job_the_other_runs(
    station: Station,
) -> None:
    receiver, runner = station.instance("a"), station.instance("b")
    kept_early: list[list[dict[str, Any]]] = []

    async def position(command: EquipmentCommand) -> None:
        await runner.reply(command, {"position": "fitting"})
        await runner.report(QA_RESULT, QA, "camera")

    async def tighten(command: EquipmentCommand) -> None:
        await receiver.report(TORQUE_RESULT, TORQUE, "tightener")  # early, on the other one
        kept_early.append(await station.kept())
        await runner.reply(command, {"torque": 85.2, "unit": "Nm"})

    station.answer({POSITION: position, TIGHTEN: tighten})
    async with running(receiver.gateway), running(runner.gateway):
        completed_with_torque(await station.run_axle())
    [[kept]] = kept_early  # in Redis, for the job holding the tightener
    assert kept["job_order_id"] == "J1"
    # The runner activated VerifyTorque (it applied both branches' last stimuli) and took the
    # kept torque result in the commit that left it; the receiver moved none of those steps.
    assert "VerifyTorque" in runner.steps.entered & runner.steps.left
    assert "VerifyTorque" not in receiver.steps.entered | receiver.steps.left


async def test_the_simulated_station_knowing_no_jobs_completes_every_rear_axle_job(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    # The station: the tightener reports its torque result before it answers, so
    # always before VerifyTorque is active, naming no job; so does the camera its QA result.
    # Positioner and camera speak MQTT, the tightener MessagePack-RPC.
    simulator = fast_devices(f"{unique}-sim", events_name_job="false", rpc_devices="tightener")
    environ = station_environ(
        mqtt_url=mqtt_url,
        redis_url=redis_url,
        name=unique,
        simulator=simulator,
        extra={"GATEWAY_MSGPACK_RPC_PORT": str(free_port())},
    )
    station = Station(mqtt_url, redis_url, unique)
    async with running(Gateway.from_environment(None, environ)):
        for job in ("J1", "J2", "J3"):
            response = await station.run_axle(job)
            assert state_of(response)[:2] == ["Ended", "Completed"], response
            data = data_of(response)
            assert data["verify"] == data["tighten"]  # the tightener's own result
            assert data["camera_qa"]["image"] == "sim://camera/" + job + ".png"
