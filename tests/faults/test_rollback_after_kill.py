"""An instance killed (SIGKILL) while the job it runs is being rolled back.

J1 clamps the part, then its tightening fails (the simulator's tightener is faulty): the runtime
starts undoing the clamp. The instance that does is killed as soon as it says so, while the
simulated clamp is still opening (it takes a second). The other instance takes the job's work
over (claimed after ``CLAIM_IDLE_SECONDS``): the rollback resumes from the stored state, and the
job ends exactly once, FAILED_SAFE, with the one compensation it has.
"""

from __future__ import annotations

import pytest

from gateway.testing import wait_until
from gateway_jobs.testing import response_data, state_texts
from gateway_sequence import DATASCHEMA as SEQUENCE

from .conftest import (
    EQUIPMENT,
    SCOPE,
    FaultStation,
    StationRecipe,
    configure_rear_axle,
    endings,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TYPES = "com.example.station"
CLAMP_THEN_TIGHTEN = StationRecipe(
    SEQUENCE,
    {
        "timeout_seconds": 20,
        "steps": [
            {
                "name": "clamp",
                "type_id": f"{TYPES}.clamp.v1",
                "equipment": "clamp",
                "compensation": {"name": "unclamp", "type_id": f"{TYPES}.unclamp.v1"},
            },
            {"name": "tighten", "type_id": f"{TYPES}.tighten.v1", "equipment": "tightener"},
        ],
    },
)


async def test_a_rollback_resumes_after_its_instance_is_killed(
    fault_station: FaultStation,
) -> None:
    station = fault_station
    station.environ.update(
        {
            "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": ",".join((*EQUIPMENT, "clamp")),
            "GATEWAY_SIMULATOR_CLAMP": "clamp",
            "GATEWAY_SIMULATOR_FAULTS": "tightener",
            "GATEWAY_SIMULATOR_POSITION_SECONDS": "1",  # the clamp opens (and closes) slowly
        }
    )
    await station.start()
    async with station.mes() as mes:
        await configure_rear_axle(mes, CLAMP_THEN_TIGHTEN)
        await store_jobs(mes, ["J1"])

        def rolling_back(instance: str) -> bool:
            log = station.gateways[instance].log.read_text(errors="replace")
            return f"job {SCOPE}/J1: rolling back" in log

        await wait_until(lambda: rolling_back("a") or rolling_back("b"), timeout=30)
        victim = "a" if rolling_back("a") else "b"
        station.gateways[victim].kill()
        ended = await wait_for_all_ended(mes, ["J1"], timeout=60)
        station.gateways[victim].start()  # as a supervisor would
    data = response_data(ended["J1"])
    assert state_texts(ended["J1"])[:1] == ["Aborted"]
    assert (data["Rollback"], data["SideEffects"]) == ("FAILED_SAFE", False)
    assert data["Compensations"] == [
        {"action": "clamp", "compensation": "unclamp", "outcome": "done"}
    ]
    assert (await endings(station))["J1"] == 1  # ended exactly once
