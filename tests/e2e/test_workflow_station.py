"""The workflow model on the simulated station (real mosquitto and Redis, simulated devices
over MQTT): a clamp undone when tightening fails, and four nutrunners tightening at once.

The simulator's ``clamp`` and ``nutrunners`` are extra devices; ``faults`` injects failures
(``tightener``: every command to it fails; ``clamp.unclamp``: only its unclamp).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import pytest

from gateway.app import Gateway
from gateway.testing import running
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
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TYPES = "com.example.station"
NUTRUNNERS = ["nr1", "nr2", "nr3", "nr4"]
CLAMP_THEN_TIGHTEN = {
    "timeout_seconds": 5,
    "steps": [
        {
            "name": "clamp",
            "type_id": f"{TYPES}.clamp.v1",
            "equipment": "clamp",
            "compensation": {"name": "unclamp", "type_id": f"{TYPES}.unclamp.v1"},
        },
        {"name": "tighten", "type_id": f"{TYPES}.tighten.v1", "equipment": "tightener"},
    ],
}


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str

    def gateway(self, **simulator: str) -> Gateway:
        devices = {"clamp": "clamp", "nutrunners": ",".join(NUTRUNNERS), **simulator}
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            simulator=fast_devices(f"{self.name}-sim", **devices),
        )
        return Gateway.from_environment(None, environ)

    def mes(self) -> AbstractAsyncContextManager[JobsMes]:
        return connect_mes(self.mqtt_url, self.name)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


@pytest.mark.parametrize(
    ("faults", "rollback", "side_effects"),
    [("tightener", "FAILED_SAFE", False), ("tightener,clamp.unclamp", "FAILED_UNSAFE", True)],
    ids=["unclamped", "unclamp-fails"],
)
async def test_a_failed_tightening_is_undone_by_the_simulated_clamp(
    station: Station, faults: str, rollback: str, side_effects: bool
) -> None:
    async with running(station.gateway(faults=faults)), station.mes() as mes:
        await store_and_start(mes, CLAMP_THEN_TIGHTEN, dataschema=SEQUENCE)
        response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    data = results(response)
    assert (data["Rollback"], data["SideEffects"]) == (rollback, side_effects)
    assert data["clamp"] == {"closed": True}
    if not side_effects:
        assert data["unclamp"] == {"closed": False}  # the compensation's reply


async def test_four_simulated_nutrunners_tighten_at_once_and_one_may_fail(
    station: Station,
) -> None:
    recipe = {
        "timeout_seconds": 5,
        "steps": [
            {
                "name": "tighten",
                "type_id": f"{TYPES}.tighten.v1",
                "fan_out": {"members": "declared", "policy": 3},
            },
        ],
    }
    declared = [
        {"ID": name, "Properties": [{"ID": "TypeIds", "Value": [f"{TYPES}.tighten.v1"]}]}
        for name in NUTRUNNERS
    ]
    async with running(station.gateway(faults="nr3")), station.mes() as mes:
        assert return_status(await mes.configure("equipment", declared)) == ReturnStatus.NO_ERROR
        await store_and_start(mes, recipe, dataschema=SEQUENCE)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    tightened = results(response)["tighten"]
    assert sorted(tightened) == NUTRUNNERS
    assert tightened["nr1"]["torque_ok"] is True
    assert tightened["nr3"]["error"].endswith("nr3: injected fault (tighten)")
