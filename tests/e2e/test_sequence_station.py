"""Sequence recipes on the simulated station, end to end over real mosquitto and Redis.

The MES configures a Work Master whose recipe is a sequence (``gateway_sequence``), stores and
starts a job over MQTT; the sequence engine commands the simulator's equipment through the same
equipment hub and drivers as the SFC engine, and job management ends the job.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.testing import running
from gateway_jobs.testing import JobsMes, connect_mes, final_response, store_and_start
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_sequence import DATASCHEMA
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TYPES = "com.example.station"

AXLE: dict[str, Any] = {
    "name": "Axle fitting as a sequence",
    "timeout_seconds": 10,
    "steps": [
        {
            "name": "position",
            "type_id": f"{TYPES}.position.v1",
            "equipment": "positioner",
            "parameters": {"position": "fitting"},
        },
        {
            "name": "fit_and_inspect",
            "par": [
                {
                    "name": "tighten",
                    "type_id": f"{TYPES}.tighten.v1",
                    "equipment": "tightener",
                    "parameters": {"torque_spec": "85Nm"},
                },
                {"name": "inspect", "type_id": f"{TYPES}.inspect.v1", "equipment": "camera"},
            ],
        },
        {
            "name": "home",
            "type_id": f"{TYPES}.position.v1",
            "equipment": "positioner",
            "parameters": {"position": "home"},
        },
    ],
}


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str

    def gateway(self, instance: str = "a", **simulator: str) -> Gateway:
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance=instance,
            simulator=fast_devices(f"{self.name}-sim", **simulator),
        )
        return Gateway.from_environment(None, environ)

    def mes(self) -> AbstractAsyncContextManager[JobsMes]:
        return connect_mes(self.mqtt_url, self.name)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


async def start_job(mes: JobsMes, recipe: dict[str, Any], job: str = "J1") -> None:
    await store_and_start(mes, recipe, job, dataschema=DATASCHEMA)


async def test_a_sequence_with_a_par_block_runs_the_station_to_completed(
    station: Station,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await start_job(mes, AXLE)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    data = results(response)
    assert data["position"]["in_position"] is True
    assert data["tighten"]["setpoint"] == 85.0
    assert data["tighten"]["torque_ok"] is True
    assert data["inspect"]["passed"] is True
    assert data["home"]["position"] == "home"


def with_tighten(**fields: Any) -> dict[str, Any]:
    """The axle sequence, its ``tighten`` step changed by ``fields``."""
    position, fit, home = AXLE["steps"]
    tighten, inspect = fit["par"]
    return {**AXLE, "steps": [position, {**fit, "par": [{**tighten, **fields}, inspect]}, home]}


async def test_a_failing_tightening_aborts_the_job_with_the_equipments_error(
    station: Station,
) -> None:
    async with running(station.gateway(failure_rate="1")), station.mes() as mes:
        await start_job(mes, AXLE)
        response = await final_response(mes)
    assert states(response) == ["Aborted"]
    data = results(response)
    assert data["Error"].startswith("step tighten: ")
    assert "spindle fault: torque not reached" in data["Error"]
    assert data["SideEffects"] is True
    assert data["position"]["in_position"] is True  # what was done before stays in the response
    assert "home" not in data


async def test_a_tightening_slower_than_its_timeout_aborts_the_job(station: Station) -> None:
    async with running(station.gateway(tighten_seconds="30")), station.mes() as mes:
        await start_job(mes, with_tighten(timeout_seconds=0.5))
        response = await final_response(mes)
    assert states(response) == ["Aborted"]
    error = results(response)["Error"]
    # Under load the simulator's heartbeats may come late: its equipment then also looks
    # offline, which the error says first.
    assert error.startswith("step tighten: ")
    assert error.endswith("no reply within 0.5 s")
