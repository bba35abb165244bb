"""A job the MES stops or aborts while its recipe runs: its Job Response is final
(``has_result``) only once the recipe's results are in it, or once they are overdue."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.changes import ChangeRecord, Trigger
from gateway.equipment import EquipmentCommand
from gateway.formats import Execution
from gateway.testing import poll_until, running
from gateway.testing.equipment import NoAnswer, TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import change_records, return_status
from gateway_runtime.coordination import Coordinator
from gateway_sfc.testing import linear_recipe
from tests.plugins.gateway_runtime.test_coordination import SfcStation, run_job

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def first_answers(command: EquipmentCommand) -> Any:
    if command.action == "a0":
        return {"torque": 42}
    raise NoAnswer


def results_of(record: ChangeRecord) -> str:
    return record.job_response or ""


@pytest.mark.parametrize("method", ["Stop", "Abort"])
async def test_the_response_is_final_once_the_recipe_recorded_its_results(
    mqtt_url: str, redis_url: str, unique: str, method: str
) -> None:
    station = SfcStation(mqtt_url, redis_url, unique, TestEquipment({"bench": first_answers}))
    gateway = station.gateway()
    release = anyio.Event()
    async with running(gateway), station.mes() as mes:
        steps = gateway.state.get(Coordinator).steps
        report = steps.report

        async def late_report(scope: str, job: str, execution: Execution | None = None) -> None:
            await release.wait()  # the recipe's report comes late (a slow instance)
            await report(scope, job, execution)

        steps.report = late_report  # type: ignore[method-assign]
        await run_job(mes, linear_recipe(2))
        store = gateway.store
        assert store is not None

        async def second_command_out() -> bool:
            return len(station.equipment.sent()) == 2

        await poll_until(second_command_out)
        assert return_status(await mes.act(method, "J1")) == ReturnStatus.NO_ERROR
        ended = (await change_records(store, "cell1"))[-1]
        assert ended.trigger == method
        assert not ended.has_result  # the recipe's results are not in yet
        release.set()

        async def final() -> bool:
            return (await change_records(store, "cell1"))[-1].has_result

        await poll_until(final)
        last = (await change_records(store, "cell1"))[-1]
        assert last.trigger is Trigger.RESULT_UPDATE
        assert '"torque":42' in results_of(last)


async def test_a_recipe_that_never_reports_holds_the_response_back_only_a_while(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    station = SfcStation(mqtt_url, redis_url, unique, TestEquipment({"bench": first_answers}))
    gateway = station.gateway(GATEWAY_JOBS_RESULTS_WAIT_SECONDS="0.3")
    async with running(gateway), station.mes() as mes:
        steps = gateway.state.get(Coordinator).steps

        async def never(scope: str, job: str, execution: Execution | None = None) -> None:
            """The instance that would report is gone."""

        steps.report = never  # type: ignore[method-assign]
        await run_job(mes, linear_recipe(2))
        store = gateway.store
        assert store is not None

        async def second_command_out() -> bool:
            return len(station.equipment.sent()) == 2

        await poll_until(second_command_out)
        assert return_status(await mes.act("Stop", "J1")) == ReturnStatus.NO_ERROR

        async def final() -> bool:
            return (await change_records(store, "cell1"))[-1].has_result

        await poll_until(final, timeout=5)
        assert (await change_records(store, "cell1"))[-1].trigger is Trigger.RESULT_UPDATE
