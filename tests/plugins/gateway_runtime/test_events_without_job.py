"""Equipment events that name no job (a PLC that knows no job ids): the job holding the
equipment takes them, also when they come before its step waits; from equipment no job holds
they change nothing. On real Redis (every deployment) and MQTT, through the runtime's entry
points; the recipe format does not matter (``gateway_runtime.events``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.testing import poll_until, running, wait_until
from gateway.testing.redis_ha import redis_client
from gateway_jobs.testing import final_response
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from tests.plugins.gateway_runtime.test_coordination import (
    TORQUE_RESULT,
    ActiveSteps,
    SfcStation,
    run_job,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TIGHTEN = "com.example.station.tighten.v1"
TORQUE = {"torque": 85.2, "torque_ok": True}


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> SfcStation:
    return SfcStation(mqtt_url, redis_url, unique)


def tighten_then_verify(*, verify: bool = True) -> dict[str, Any]:
    """Tighten on the tightener, then (``verify``) wait for the tightener's torque result."""
    steps: list[dict[str, Any]] = [{"name": "Tighten", "initial": True}, {"name": "Done"}]
    actions: list[dict[str, Any]] = [
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": TIGHTEN,
            "equipment": "tightener",
        }
    ]
    transitions = [{"source": "Tighten", "target": "Done"}]
    if verify:
        steps.insert(1, {"name": "Verify"})
        transitions = [
            {"source": "Tighten", "target": "Verify"},
            {"source": "Verify", "target": "Done"},
        ]
        actions.append(
            {
                "name": "verify",
                "step": "Verify",
                "interaction": "pull_event",
                "type_id": TORQUE_RESULT,
                "equipment": "tightener",
                "timeout_seconds": 10,
            }
        )
    return {"steps": steps, "transitions": transitions, "actions": actions}


async def kept_events(station: SfcStation, scope: str = "cell1") -> list[dict[str, Any]]:
    async with redis_client(station.redis_url) as redis:
        kept = await redis.lrange(f"{station.name}:{{{scope}}}:rt:unclaimed", 0, -1)
    return [json.loads(text) for text in kept]


def dropped(gateway: Gateway, reason: str) -> float:
    name, labels = "gateway_equipment_events_dropped_total", {"reason": reason}
    return gateway.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_an_early_event_naming_no_job_is_kept_for_the_job_holding_its_equipment(
    station: SfcStation,
) -> None:
    kept_during_tighten: list[list[dict[str, Any]]] = []

    async def tighten(command: EquipmentCommand) -> Any:
        # The torque result comes before the reply, so before Verify can be active: early.
        await station.equipment.emit(TORQUE_RESULT, TORQUE, equipment="tightener")
        kept_during_tighten.append(await kept_events(station))
        return {"ok": True}

    station.equipment.behaviours = {TIGHTEN: tighten}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, tighten_then_verify())
        response = await final_response(mes, "J1")
        assert await kept_events(station) == []
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["verify"] == TORQUE
    [kept] = kept_during_tighten[0]  # kept for the job holding the tightener, no other
    assert (kept["job_order_id"], kept["equipment"]) == ("J1", "tightener")


async def test_an_event_from_equipment_no_job_holds_changes_no_job(station: SfcStation) -> None:
    steps = ActiveSteps()
    station.observers["steps"] = steps
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        await station.equipment.emit(TORQUE_RESULT, {"stray": 1}, equipment="tightener")
        assert dropped(gateway, "not_held") == 1  # no job runs at all yet
        await run_job(mes, tighten_then_verify())
        await wait_until(lambda: ("cell1", "J1", "Verify") in steps.entered)
        # J1 holds the tightener and waits for its torque result: a press's is not its own.
        await station.equipment.emit(TORQUE_RESULT, {"stray": 2}, equipment="press")
        assert dropped(gateway, "not_held") == 2
        assert await kept_events(station) == []
        await station.equipment.emit(TORQUE_RESULT, TORQUE, equipment="tightener")
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["verify"] == TORQUE


async def test_events_kept_for_a_job_that_ends_go_with_it_and_are_counted(
    station: SfcStation,
) -> None:
    async def tighten(command: EquipmentCommand) -> Any:
        # Attributed to J1, which holds the tightener, but J1 never waits for a torque result.
        await station.equipment.emit(TORQUE_RESULT, TORQUE, equipment="tightener")
        return {"ok": True}

    station.equipment.behaviours = {TIGHTEN: tighten}
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        await run_job(mes, tighten_then_verify(verify=False))
        assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]

        async def none_kept() -> bool:
            return await kept_events(station) == []

        await poll_until(none_kept)
        await wait_until(lambda: dropped(gateway, "job_ended") == 1)
