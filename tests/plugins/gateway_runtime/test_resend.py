"""Commands to equipment that went offline and came back are sent again, same correlation id.

A command published while its equipment was away may never reach it (a device reconnecting
with a clean session loses what came meanwhile). When the equipment's heartbeat comes back,
every command still waiting for its reply is sent again while its action's timeout allows, so
the job goes on instead of failing with "no reply".
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from gateway.equipment import EquipmentCommand, EquipmentHub
from gateway.testing import running, wait_until
from gateway.testing.equipment import NoAnswer, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway.testing.redis_ha import redis_client
from gateway_jobs.testing import JobsMes, final_response, job_order, work_master
from gateway_jobs.testing import state_texts as state_of
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

RECIPE: dict[str, Any] = {
    "steps": [{"name": "Init", "initial": True}, {"name": "Tighten"}],
    "transitions": [{"source": "Init", "target": "Tighten"}],
    "actions": [
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": "com.example.tighten.v1",
            "equipment": "tool",
            "timeout_seconds": 30,
        }
    ],
}


async def test_a_command_lost_while_its_equipment_was_away_is_sent_again_when_it_is_back(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    deliveries = 0

    def lost_while_away(command: EquipmentCommand) -> Any:
        nonlocal deliveries
        deliveries += 1
        if deliveries == 1:  # the equipment is away: this delivery never reaches it
            raise NoAnswer
        return {"torque": 85.0}

    equipment = TestEquipment({"com.example.tighten.v1": lost_while_away})
    instance = station_with(equipment, mqtt_url, redis_url, unique)
    async with running(instance), connect_test_client(mqtt_url) as client:
        hub = instance.equipment
        await goes_away(hub, "tool")
        mes = JobsMes(client, unique, "cell1")
        await mes.configure("workmaster", work_master("WM", RECIPE, dataschema=DATASCHEMA))
        await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        await wait_until(lambda: deliveries == 1)
        await hub.heartbeat("tool", timeout_seconds=5)  # back
        response = await final_response(mes, "J1", timeout=10)  # well within the 30 s timeout
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert [c.correlation_id for c in equipment.received] == ["J1:tighten:1", "J1:tighten:1"]


async def test_a_command_whose_deadline_passed_while_its_equipment_was_away_is_not_sent_again(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    timeout = 0.3
    recipe = {**RECIPE, "actions": [{**RECIPE["actions"][0], "timeout_seconds": timeout}]}

    def never(command: EquipmentCommand) -> Any:
        raise NoAnswer

    equipment = TestEquipment({"com.example.tighten.v1": never})
    # The timeout timer is not polled during the test: the job stays with its deadline passed
    # but its action not failed yet, the moment the resend must leave alone.
    polls = {"GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "600"}
    instance = station_with(equipment, mqtt_url, redis_url, unique, **polls)
    async with running(instance), connect_test_client(mqtt_url) as client:
        hub = instance.equipment
        await goes_away(hub, "tool")
        mes = JobsMes(client, unique, "cell1")
        await mes.configure("workmaster", work_master("WM", recipe, dataschema=DATASCHEMA))
        await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        await wait_until(lambda: equipment.received)
        sent = time.time()  # the deadline was set before: at most ``timeout`` from now
        await anyio.sleep(timeout)  # what the test is about: the action's time runs out
        assert time.time() > sent + timeout
        await hub.heartbeat("tool", timeout_seconds=5)  # back: a resend would be queued now
        await engine_settled(redis_url, unique)
    assert [c.correlation_id for c in equipment.received] == ["J1:tighten:1"]
    assert "sending J1:tighten:1 again" not in caplog.text


async def engine_settled(redis_url: str, name: str) -> None:
    """Until the engine has handled every entry of the scope's work stream."""
    stream = f"{name}:{{cell1}}:rt:work"
    async with redis_client(redis_url) as redis:

        async def settled() -> bool:
            last = (await redis.xinfo_stream(stream))["last-generated-id"]
            groups = await redis.xinfo_groups(stream)
            return all(g["pending"] == 0 and g["last-delivered-id"] == last for g in groups)

        with anyio.fail_after(10):
            while not await settled():  # noqa: ASYNC110  # another task's progress in Redis
                await anyio.sleep(0.02)


async def goes_away(hub: EquipmentHub, equipment: str) -> None:
    """A heartbeat with a short timeout, then none: ``equipment`` is offline."""
    await hub.heartbeat(equipment, timeout_seconds=0.2)
    with anyio.fail_after(10):
        while (await hub.liveness(equipment)).online:  # noqa: ASYNC110
            await anyio.sleep(0.05)
