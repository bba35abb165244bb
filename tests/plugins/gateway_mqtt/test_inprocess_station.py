"""A station on the in-process broker: ``GATEWAY_MQTT_URL=memory://demo`` runs jobs end to end.

The gateway (jobs + SFC plugins, real Redis), the MES and the equipment share one process and
no broker is installed: the MES is the ordinary ``connect_test_client``, the equipment the
in-process ``TestEquipment`` driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.codecs.mqtt import from_mqtt
from gateway.equipment import EquipmentCommand
from gateway.testing import running
from gateway.testing.equipment import TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_mqtt import memory
from gateway_mqtt.clients import connect_test_client
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

BROKER = "demo"
RECIPE = Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json"
TORQUE_RESULT = "com.example.station.torque_result.v1"
QA_RESULT = "com.example.station.qa_result.v1"


@pytest.fixture
def demo_broker() -> Iterator[str]:
    memory.drop_broker(BROKER)
    yield f"memory://{BROKER}"
    memory.drop_broker(BROKER)


def station_gateway(url: str, redis_url: str, name: str, equipment: TestEquipment) -> Gateway:
    environ = {
        "GATEWAY_MQTT_URL": url,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": name,
        "GATEWAY_GATEWAY_INSTANCE_ID": f"{name}-a",
        "GATEWAY_JOBS_TOPIC_PREFIX": name,
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
    }
    return Gateway.from_environment(None, environ, extra_plugins={"equipment": equipment})


def station_equipment(equipment: TestEquipment) -> dict[str, Any]:
    """Tightener and camera report their results naming no job, the camera once the axle is
    positioned: the job holds both by then, so the events are its own."""

    async def tighten(command: EquipmentCommand) -> Any:
        result = {"torque": 85.2, "torque_ok": True}
        await equipment.emit(TORQUE_RESULT, result, equipment="tightener", scope=command.scope)
        return {"torque": 85.2, "unit": "Nm"}

    async def position(command: EquipmentCommand) -> Any:
        await equipment.emit(QA_RESULT, {"passed": True}, equipment="camera", scope=command.scope)
        return {"ok": True}

    return {"com.example.station.tighten.v1": tighten, "com.example.station.position.v1": position}


async def job_states(mes: JobsMes, job: str) -> list[str]:
    response = (await mes.job_response(job)).data["JobResponse"]
    return [state["StateText"]["Text"] for state in response.get("JobState", [])]


async def test_a_job_runs_to_completed_over_the_in_process_broker(
    demo_broker: str, redis_url: str, unique: str
) -> None:
    equipment = TestEquipment()
    equipment.behaviours = station_equipment(equipment)
    gateway = station_gateway(demo_broker, redis_url, unique, equipment)
    async with (
        running(gateway),
        connect_test_client(demo_broker) as client,
        client.watch(f"{unique}/cell1/events") as events,
    ):
        mes = JobsMes(client, unique, "cell1")
        wm = work_master("WM-1", json.loads(RECIPE.read_text()), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == ReturnStatus.NO_ERROR
        stored = await mes.store(job_order("J1", work_masters=["WM-1"]), method="StoreAndStart")
        assert return_status(stored) == ReturnStatus.NO_ERROR
        with anyio.fail_after(10):  # status events reach the MES over the same broker
            while state_in(from_mqtt(await events.receive()).data) != "Ended":
                pass
        assert (await job_states(mes, "J1"))[:2] == ["Ended", "Completed"]
    assert [command.correlation_id for command in equipment.received] == [
        "J1:position_axle:1",
        "J1:tighten:1",
    ]
    assert memory.get_broker(BROKER).has_session(f"gw-{unique}-a")  # persistent session


def state_in(status: Any) -> str:
    return str(status["JobState"][0]["StateText"]["Text"])
