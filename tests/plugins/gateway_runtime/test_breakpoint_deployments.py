"""Breakpoints on every Redis deployment (one node, Sentinel, Cluster): a job held before its
first step (no state yet) and before a later one, resumed each time, completes."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.testing import poll_until, running
from gateway.testing.equipment import TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import state_texts as state_of
from gateway_sequence import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def step(name: str) -> dict[str, Any]:
    return {"name": name, "type_id": "bench", "timeout_seconds": 10}


async def test_a_job_held_before_its_first_and_a_later_step_completes_after_two_resumes(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    equipment = TestEquipment()
    gateway = station_with(equipment, mqtt_url, redis_url, unique)
    async with running(gateway), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, "cell1")
        wm = work_master("WM", {"steps": [step("a"), step("b")]}, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == 1
        assert return_status(await mes.set_breakpoint("a", work_master="WM")) == 1
        assert return_status(await mes.store(job_order("J1", work_masters=["WM"]))) == 1
        assert return_status(await mes.set_breakpoint("b", job="J1")) == 1

        async def suspended() -> bool:
            reply = await mes.job_response("J1")
            return bool(state_of(reply.data["JobResponse"]) == ["Interrupted", "Suspended"])

        assert return_status(await mes.act("Start", "J1")) == 1
        for held_before in ("a", "b"):
            await poll_until(suspended)
            assert len(equipment.received) == ["a", "b"].index(held_before)
            assert return_status(await mes.act("Resume", "J1")) == 1
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert [command.correlation_id for command in equipment.received] == ["J1:a:1", "J1:b:1"]
