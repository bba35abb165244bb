"""Retries of a whole step or block, end to end (real mosquitto and Redis, ``TestEquipment``):
the failed tightening runs its step (SFC) or its par block (sequence) again, the clamp too,
after the backoff, which the runtime keeps as a durable timer."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.equipment import EquipmentCommand
from gateway.testing import running
from gateway.testing.equipment import EquipmentFailure
from gateway_jobs.testing import final_response, store_and_start
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_sfc.model import DATASCHEMA as SFC
from tests.e2e.test_workflow import CLAMP, TIGHTEN, Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

BACKOFF = 0.3
STEP_RETRY_CHART = {
    "steps": [
        {
            "name": "Work",
            "initial": True,
            "retry": {"max_attempts": 2, "backoff_seconds": BACKOFF},
        },
        {"name": "Done"},
    ],
    "transitions": [{"source": "Work", "target": "Done", "condition": "always"}],
    "actions": [
        {
            "name": "clamp",
            "step": "Work",
            "interaction": "push_command",
            "type_id": CLAMP,
            "equipment": "clamp1",
            "timeout_seconds": 5,
        },
        {
            "name": "tighten",
            "step": "Work",
            "interaction": "push_command",
            "type_id": TIGHTEN,
            "equipment": "nutrunner1",
            "timeout_seconds": 5,
        },
    ],
}


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


class Recorded:
    """Behaviours that note when each command came; the first ``failures`` tightenings fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.times: list[tuple[str, float]] = []

    def behaviour(self, command: EquipmentCommand) -> Any:
        self.times.append((command.action, time.monotonic()))
        if command.type == TIGHTEN and self.failures > 0:
            self.failures -= 1
            raise EquipmentFailure("torque not reached")
        return {"ok": True}


async def test_a_failed_tightening_runs_its_sfc_step_again_after_the_backoff(
    station: Station,
) -> None:
    recorded = Recorded(failures=1)
    station.equipment.behaviours = {CLAMP: recorded.behaviour, TIGHTEN: recorded.behaviour}
    async with running(station.gateway()), station.mes() as mes:
        await store_and_start(mes, STEP_RETRY_CHART, dataschema=SFC)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert results(response)["tighten"] == {"ok": True}
    actions = [action for action, _ in recorded.times]
    assert sorted(actions[:2]) == sorted(actions[2:]) == ["clamp", "tighten"]  # the whole step
    failed_at = next(at for action, at in recorded.times if action == "tighten")
    again_at = min(at for _, at in recorded.times[2:])
    assert again_at - failed_at >= BACKOFF  # not before the backoff passed


STEP_BACKOFF = 0.2
PAR_RETRY_SEQUENCE = {
    "timeout_seconds": 5,
    "steps": [
        {
            "name": "work",
            "max_attempts": 2,
            "backoff_seconds": BACKOFF,
            "par": [
                {"name": "clamp", "type_id": CLAMP, "equipment": "clamp1"},
                {
                    "name": "tighten",
                    "type_id": TIGHTEN,
                    "equipment": "nutrunner1",
                    "max_attempts": 2,
                    "backoff_seconds": STEP_BACKOFF,
                },
            ],
        }
    ],
}


async def test_a_sequence_tries_its_step_then_its_par_block_again_after_their_backoffs(
    station: Station,
) -> None:
    recorded = Recorded(failures=2)  # both tries of the tightening: the block runs again
    station.equipment.behaviours = {CLAMP: recorded.behaviour, TIGHTEN: recorded.behaviour}
    async with running(station.gateway()), station.mes() as mes:
        await store_and_start(mes, PAR_RETRY_SEQUENCE, dataschema=SEQUENCE)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    tightenings = [at for action, at in recorded.times if action == "tighten"]
    clampings = [at for action, at in recorded.times if action == "clamp"]
    assert (len(tightenings), len(clampings)) == (3, 2)
    assert tightenings[1] - tightenings[0] >= STEP_BACKOFF  # the step's own backoff
    assert clampings[1] - tightenings[1] >= BACKOFF  # then the block's, clamp and all
    assert tightenings[2] - tightenings[1] >= BACKOFF
