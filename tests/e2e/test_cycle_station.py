"""The example recipe format (``gateway_cycle``) end to end, over real mosquitto and Redis.

The MES configures a Work Master whose recipe is a cycle recipe and stores and starts a job over
MQTT; the recipe runtime runs it on the simulated station (or on scripted equipment, where a
test needs to hold a reply back), and job management ends the job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.recipes import RecipeProgress, RecipeViewer
from gateway.testing import poll_until, running, wait_until
from gateway.testing.equipment import TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_cycle.format import DATASCHEMA
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    connect_mes,
    final_response,
    return_status,
    store_and_start,
)
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

EXAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "examples" / "cycles" / "three_bolts.json").read_text()
)


async def progress(gateway: Gateway, job: str) -> RecipeProgress:
    """The job's progress as the runtime shows it to the web UI."""
    viewer = gateway.recipe_interpreters[DATASCHEMA]
    assert isinstance(viewer, RecipeViewer)
    shown = await viewer.progress("cell1", job)
    assert shown is not None
    return shown


async def paused(gateway: Gateway, job: str) -> bool:
    """Whether the runtime has applied the MES's Pause to the job (the job's state changes
    first, then the runtime takes the command from its work stream)."""
    return (await progress(gateway, job)).status == "paused"


def simulated(mqtt_url: str, redis_url: str, name: str, **simulator: str) -> Gateway:
    environ = station_environ(
        mqtt_url=mqtt_url,
        redis_url=redis_url,
        name=name,
        simulator=fast_devices(f"{name}-sim", **simulator),
    )
    return Gateway.from_environment(None, environ)


async def test_the_example_runs_the_station_three_cycles_to_completed(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    gateway = simulated(mqtt_url, redis_url, unique)
    async with running(gateway), connect_mes(mqtt_url, unique) as mes:
        await store_and_start(mes, EXAMPLE, "J1", dataschema=DATASCHEMA)
        response = await final_response(mes)
        shown = await progress(gateway, "J1")  # the ended job's state, kept for inspection
    assert states(response)[:2] == ["Ended", "Completed"]
    data = results(response)
    assert data["position"]["in_position"] is True
    assert data["tighten"]["torque_ok"] is True
    # Three cycles: each command's last activation sent its third try (J1:tighten:3).
    assert {(a.name, a.phase, a.attempt) for a in shown.actions} == {
        ("position", "done", 3),
        ("tighten", "done", 3),
    }


async def test_a_failing_tightening_aborts_the_job_in_its_first_cycle(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    gateway = simulated(mqtt_url, redis_url, unique, failure_rate="1")
    async with running(gateway), connect_mes(mqtt_url, unique) as mes:
        await store_and_start(mes, EXAMPLE, "J1", dataschema=DATASCHEMA)
        response = await final_response(mes)
    assert states(response) == ["Aborted"]
    data = results(response)
    assert "spindle fault: torque not reached" in data["Error"]
    assert data["Error"].startswith("tighten: ")
    assert data["position"]["in_position"] is True  # what was done before stays


async def test_pause_holds_the_next_command_back_until_resume(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"slow": True}

    equipment = TestEquipment({"com.example.a.v1": slow})
    recipe = {
        "cycles": 2,
        "commands": [
            {"name": "a", "type_id": "com.example.a.v1"},
            {"name": "b", "type_id": "com.example.b.v1"},
        ],
    }
    gateway = station_with(equipment, mqtt_url, redis_url, unique)
    async with running(gateway), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, "cell1")
        await store_and_start(mes, recipe, "J1", dataschema=DATASCHEMA)
        await wait_until(lambda: equipment.received)
        assert return_status(await mes.act("Pause", "J1")) == ReturnStatus.NO_ERROR
        await poll_until(lambda: paused(gateway, "J1"))
        release.set()  # a's reply comes while the job is paused
        await wait_until(lambda: "J1:a:1" in equipment.answered)
        sent = [command.correlation_id for command in equipment.received]
        assert sent == ["J1:a:1"]  # b waits for the Resume
        assert return_status(await mes.act("Resume", "J1")) == ReturnStatus.NO_ERROR
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    sent = [command.correlation_id for command in equipment.received]
    assert sent == ["J1:a:1", "J1:b:1", "J1:a:2", "J1:b:2"]  # a new try per cycle
    assert results(response)["a"] == {"slow": True}
