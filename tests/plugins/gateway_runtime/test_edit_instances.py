"""An edit of a running job's steps made through one instance, its next step applied by
another that kept the recipe from before the edit: it runs the edited program (the state names
the recipe version it runs, and a snapshot of another version is read again)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.equipment import CorrelationId, EquipmentCommand, EquipmentReply
from gateway.recipes import recipe_version
from gateway.testing import running, wait_until
from gateway.testing.equipment import NoAnswer, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_sequence import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


def step(name: str) -> dict[str, Any]:
    return {"name": name, "type_id": "bench", "timeout_seconds": 10}


async def test_an_instance_that_kept_the_recipe_before_an_edit_runs_the_edited_one(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    equipment = TestEquipment()
    first = station_with(equipment, mqtt_url, redis_url, unique, GATEWAY_GATEWAY_INSTANCE_ID="a")
    second = station_with(equipment, mqtt_url, redis_url, unique, GATEWAY_GATEWAY_INSTANCE_ID="b")
    held: list[EquipmentCommand] = []  # a: answered by the test, through the second instance

    async def answer(command: EquipmentCommand) -> Any:
        if CorrelationId.parse(command.correlation_id).step == "a":
            held.append(command)
        else:
            reply = EquipmentReply(command.correlation_id, data={"ok": True}, scope=command.scope)
            await second.equipment.reply(reply)
        raise NoAnswer  # answered above, through the second instance, or later

    equipment.behaviours = {"bench": answer}
    recipes = second.state.get(Coordinator).recipes
    async with running(first), running(second), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, SCOPE)
        wm = work_master("WM", {"steps": [step("a"), step("b")]}, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == 1
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == 1
        await wait_until(lambda: held)
        before = await recipes.get(SCOPE, "J1")  # the second instance keeps it from now on
        assert list(before.program.actions) == ["a", "b"]
        edited = await mes.edit_steps("J1", "insert", "a", step("x"))
        assert return_status(edited) == 1
        reply = EquipmentReply(held[0].correlation_id, data={"ok": True}, scope=SCOPE)
        await second.equipment.reply(reply)
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert [command.correlation_id for command in equipment.received] == [
        "J1:a:1",
        "J1:x:1",
        "J1:b:1",
    ]
    final = {"steps": [step("a"), step("x"), step("b")]}
    assert data_of(response)["RecipeVersion"] == recipe_version(final)
