"""The MES pauses a job just as its recipe ends: the job completes once the MES resumes it.

The recipe's end reaches job management a moment after the last reply is committed (SFC: a
``report`` work entry; sequences: right after the commit). A Pause that lands in between makes
the job Interrupted.Suspended, and Complete is refused there. Before the fix, the engines closed
their run all the same: the MES's Resume then found nothing to resume and the job stayed in
Running for good, its results never written. Here the Pause is made to land in that window
(``job_control.complete`` is wrapped: the MES's Pause is sent and answered first), over real
mosquitto and Redis, for both recipe formats.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.app import Gateway
from gateway.recipes import JobCommand, JobOutcome, RecipeJob
from gateway.testing import poll_until, running
from gateway.testing.equipment import TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    final_response,
    job_order,
    response_data,
    return_status,
    work_master,
)
from gateway_jobs.testing import state_texts as state_of
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_sfc.model import DATASCHEMA as SFC

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TIGHTEN = "com.example.tighten.v1"
SFC_RECIPE: dict[str, Any] = {
    "steps": [{"name": "Init", "initial": True}, {"name": "Tighten"}],
    "transitions": [{"source": "Init", "target": "Tighten"}],
    "actions": [
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": TIGHTEN,
            "timeout_seconds": 5,
        }
    ],
}
SEQUENCE_RECIPE: dict[str, Any] = {
    "steps": [{"name": "tighten", "type_id": TIGHTEN, "timeout_seconds": 5}]
}
FORMATS = pytest.mark.parametrize(
    ("recipe", "dataschema"),
    [(SFC_RECIPE, SFC), (SEQUENCE_RECIPE, SEQUENCE)],
    ids=["sfc", "sequence"],
)


def gateway(mqtt_url: str, redis_url: str, name: str, equipment: TestEquipment) -> Gateway:
    return station_with(
        equipment,
        mqtt_url,
        redis_url,
        name,
        GATEWAY_RUNTIME_RECONCILE_SECONDS="0.2",
    )


def pause_as_the_recipe_ends(instance: Gateway, mes: JobsMes) -> list[int]:
    """Make the MES's Pause land between the recipe's end and its report; the Pause's
    ReturnStatus is appended to the list returned."""
    control = instance.job_control
    complete = control.complete
    pauses: list[int] = []
    asked: list[bool] = []

    async def complete_after_a_pause(
        scope: str, job: str, outcome: JobOutcome, *, run: str | None = None
    ) -> bool:
        # Decided before the Pause is awaited: reconciliation may report the end again while
        # the Pause is on its way (a slow machine), and that report must not pause again.
        if not asked:
            asked.append(True)
            pauses.append(return_status(await mes.act("Pause", job)))
        return await complete(scope, job, outcome, run=run)

    control.complete = complete_after_a_pause  # type: ignore[method-assign,assignment]
    return pauses


async def run_until_paused_at_the_end(
    instance: Gateway, mes: JobsMes, recipe: dict[str, Any], dataschema: str
) -> None:
    """Store and start J1; the MES pauses it as its recipe ends, and it is Suspended."""
    pauses = pause_as_the_recipe_ends(instance, mes)
    await mes.configure("workmaster", work_master("WM", recipe, dataschema=dataschema))
    await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")

    async def paused() -> bool:  # the Pause answered (the job is Suspended a moment before)
        return bool(pauses) and await suspended(mes, "J1")

    await poll_until(paused)
    assert pauses == [ReturnStatus.NO_ERROR]


async def suspended(mes: JobsMes, job: str) -> bool:
    response = (await mes.job_response(job)).data["JobResponse"]
    return state_of(response)[:2] == ["Interrupted", "Suspended"]


@FORMATS
async def test_a_job_paused_as_its_recipe_ends_completes_when_resumed(
    mqtt_url: str, redis_url: str, unique: str, recipe: dict[str, Any], dataschema: str
) -> None:
    equipment = TestEquipment(behaviours={TIGHTEN: lambda command: {"torque": 12.5}})
    instance = gateway(mqtt_url, redis_url, unique, equipment)
    async with running(instance), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, "cell1")
        await run_until_paused_at_the_end(instance, mes, recipe, dataschema)
        assert return_status(await mes.act("Resume", "J1")) == ReturnStatus.NO_ERROR
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert equipment.correlation_counts() == {"J1:tighten:1": 1}  # not run again
    assert response_data(response)["tighten"] == {"torque": 12.5}


@FORMATS
async def test_a_job_paused_as_its_recipe_ends_keeps_the_state_the_mes_then_gives_it(
    mqtt_url: str, redis_url: str, unique: str, recipe: dict[str, Any], dataschema: str
) -> None:
    """Stopped instead of resumed: Ended.Closed, with the recipe's results."""
    equipment = TestEquipment(behaviours={TIGHTEN: lambda command: {"torque": 12.5}})
    instance = gateway(mqtt_url, redis_url, unique, equipment)
    async with running(instance), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, "cell1")
        await run_until_paused_at_the_end(instance, mes, recipe, dataschema)
        assert return_status(await mes.act("Stop", "J1")) == ReturnStatus.NO_ERROR

        async def results_written() -> bool:
            response = (await mes.job_response("J1")).data["JobResponse"]
            return "tighten" in response_data(response)

        await poll_until(results_written)
        response = (await mes.job_response("J1")).data["JobResponse"]
    assert state_of(response)[:2] == ["Ended", "Closed"]
    assert response_data(response)["tighten"] == {"torque": 12.5}


@FORMATS
async def test_a_lost_resume_of_a_job_paused_as_its_recipe_ended_is_caught_up(
    mqtt_url: str, redis_url: str, unique: str, recipe: dict[str, Any], dataschema: str
) -> None:
    """The Resume reaches job management but not the engine (a crash in between):
    reconciliation reports the recipe's end again, and the job completes."""
    equipment = TestEquipment()
    instance = gateway(mqtt_url, redis_url, unique, equipment)
    async with running(instance), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, "cell1")
        interpreter = instance.recipe_interpreters[dataschema]
        command = interpreter.command

        async def resume_lost(job: RecipeJob, call: JobCommand) -> None:
            if call is not JobCommand.RESUME:
                await command(job, call)

        interpreter.command = resume_lost  # type: ignore[method-assign,assignment]
        await run_until_paused_at_the_end(instance, mes, recipe, dataschema)
        assert return_status(await mes.act("Resume", "J1")) == ReturnStatus.NO_ERROR
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
