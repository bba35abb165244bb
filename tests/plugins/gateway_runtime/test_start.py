"""A job's start handled twice (an instance died after the first, its work entry taken over):
the MES command that came in between applies at once, for every format."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.equipment import EquipmentCommand
from gateway.formats import Status
from gateway.recipes import JobCommand, RecipeJob
from gateway.testing import poll_until, running
from gateway.testing.equipment import NoAnswer, TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import return_status
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_sfc.testing import linear_recipe
from tests.plugins.gateway_runtime.test_coordination import SfcStation, run_job

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def silent(command: EquipmentCommand) -> Any:
    raise NoAnswer


async def test_a_pause_between_two_handlings_of_a_start_applies_on_the_second(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    station = SfcStation(mqtt_url, redis_url, unique, TestEquipment({"hang": silent}))
    gateway = station.gateway(GATEWAY_RUNTIME_RECONCILE_SECONDS="3600")  # no repair meanwhile
    async with running(gateway), station.mes() as mes:
        coordinator = gateway.state.get(Coordinator)
        await run_job(mes, linear_recipe(2, type_id="hang"))
        executions = coordinator.executions

        async def started() -> bool:
            return await executions.read("cell1", "J1") is not None

        await poll_until(started)

        async def dropped(job: RecipeJob, command: JobCommand) -> None:
            """The command's hand-off dies with its instance."""

        coordinator.command_job = dropped  # type: ignore[method-assign]
        paused = await mes.act("Pause", "J1")
        assert return_status(paused) == ReturnStatus.NO_ERROR, paused.data
        state = await mes.job_response("J1")
        assert state_of(state.data["JobResponse"])[0] == "Interrupted"
        execution = await executions.read("cell1", "J1")
        assert execution is not None
        assert execution.status is Status.RUNNING  # the runtime never heard of the Pause

        await coordinator.steps.start("cell1", "J1")  # the start, handled again

        execution = await executions.read("cell1", "J1")
        assert execution is not None
        assert execution.status is Status.PAUSED
