"""Who may answer a command is checked against the job's own state: the equipment its action is
bound to (where the command went) and the try that still waits. The hub keeps no record of the
engine's commands, so a reply costs the engine's commit and nothing else in the store."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.equipment import EquipmentCommand, EquipmentReply
from gateway.errors import NotPermitted
from gateway.testing import running, wait_until
from gateway.testing.equipment import NoAnswer
from gateway.testing.redis_ha import redis_client
from gateway_jobs.testing import final_response
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from tests.plugins.gateway_runtime.test_coordination import SfcStation, run_job
from tests.plugins.gateway_runtime.test_resend import RECIPE

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> SfcStation:
    return SfcStation(mqtt_url, redis_url, unique)


async def test_a_reply_is_checked_against_the_job_and_a_repeat_is_ignored(
    station: SfcStation,
) -> None:
    def held(command: EquipmentCommand) -> Any:
        raise NoAnswer  # the test answers in its place

    station.equipment.behaviours = {"com.example.tighten.v1": held}
    instance = station.gateway()
    async with running(instance), station.mes() as mes:
        await run_job(mes, RECIPE)
        await wait_until(lambda: station.equipment.received)
        [command] = station.equipment.received
        assert command.correlation_id == "J1:tighten:1"
        hub = instance.equipment

        def reply(data: Any, equipment: str) -> EquipmentReply:
            return EquipmentReply("J1:tighten:1", data=data, equipment=equipment, scope="cell1")

        with pytest.raises(NotPermitted, match="robot may not answer command J1:tighten:1: it"):
            await hub.reply(reply("forged", "robot"))
        await hub.reply(reply({"torque": 85.0}, "tool"))
        await hub.reply(reply({"torque": 1.0}, "tool"))  # a repeat: recorded and ignored
        response = await final_response(mes, "J1")
        async with redis_client(station.redis_url) as redis:
            record = f"{station.name}:{{_global}}:equipment:sent:J1:tighten:1"
            assert not await redis.exists(record)  # the hub kept none
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["tighten"] == {"torque": 85.0}
