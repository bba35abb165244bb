"""A job id the MES stops, clears and stores again before the stopped recipe has reported.

The stopped run's report (the results it collected) comes after the new job order is stored
under the same id: a slow engine, or one that died there and whose work another instance takes
over. Before the fix the report landed on the new job: an SFC job ended with the earlier run's
results beside its own; a sequence job stayed in Running for good, its new sequence never
begun. Here the report is held until the new job order is stored, over real mosquitto and
Redis, for both recipe formats.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.testing import poll_until, running, wait_until
from gateway.testing.equipment import NoAnswer, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_sfc.model import DATASCHEMA as SFC

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR


def silent(command: EquipmentCommand) -> Any:
    raise NoAnswer


def sfc_recipe(action: str, type_id: str) -> dict[str, Any]:
    return {
        "steps": [{"name": "S", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "S", "target": "Done"}],
        "actions": [
            {"name": action, "step": "S", "interaction": "push_command", "type_id": type_id}
        ],
    }


def sequence_recipe(step: str, type_id: str) -> dict[str, Any]:
    return {"steps": [{"name": step, "type_id": type_id}]}


Call = Callable[..., Awaitable[None]]
Wrap = Callable[[Call], Call]


def wrap_runtime(gateway: Gateway, report: Wrap, start: Wrap) -> None:
    coordinator = gateway.state.find(Coordinator)
    assert coordinator is not None
    coordinator.steps.report = report(coordinator.steps.report)  # type: ignore[method-assign,assignment]
    coordinator.steps.start = start(coordinator.steps.start)  # type: ignore[method-assign,assignment]


FORMATS = pytest.mark.parametrize(
    ("dataschema", "recipe"),
    [(SFC, sfc_recipe), (SEQUENCE, sequence_recipe)],
    ids=["sfc", "sequence"],
)


@asynccontextmanager
async def station(
    mqtt_url: str, redis_url: str, name: str, equipment: TestEquipment
) -> AsyncIterator[tuple[Gateway, JobsMes]]:
    gateway = station_with(
        equipment,
        mqtt_url,
        redis_url,
        name,
        GATEWAY_RUNTIME_RECONCILE_SECONDS="0.2",
    )
    async with running(gateway), connect_test_client(mqtt_url) as client:
        yield gateway, JobsMes(client, name, "cell1")


@FORMATS
@pytest.mark.parametrize("method", ["Stop", "Abort"])
async def test_a_job_id_stored_again_runs_its_own_recipe_with_its_own_results_only(
    mqtt_url: str,
    redis_url: str,
    unique: str,
    dataschema: str,
    recipe: Callable[[str, str], dict[str, Any]],
    method: str,
) -> None:
    equipment = TestEquipment({"old": lambda command: {"old": 1}, "hang": silent})
    release, tried = anyio.Event(), anyio.Event()

    def held(report: Call) -> Call:
        async def after_release(*args: Any) -> None:
            await release.wait()
            await report(*args)

        return after_release

    def noted(start: Call) -> Call:
        async def and_tell(*args: Any) -> None:
            try:
                await start(*args)
            finally:
                tried.set()

        return and_tell

    async with station(mqtt_url, redis_url, unique, equipment) as (gateway, mes):
        old = recipe("a0", "old")
        old["steps" if dataschema == SEQUENCE else "actions"].append(
            {"name": "a1", "type_id": "hang"}
            if dataschema == SEQUENCE
            else {"name": "a1", "step": "S", "interaction": "push_command", "type_id": "hang"}
        )
        for name, content in (("WM-old", old), ("WM-new", recipe("b0", "new"))):
            configured = await mes.configure(
                "workmaster", work_master(name, content, dataschema=dataschema)
            )
            assert return_status(configured) == OK
        first = job_order("J1", work_masters=["WM-old"])
        assert return_status(await mes.store(first, method="StoreAndStart")) == OK
        await wait_until(lambda: len(equipment.answered) == 1)  # a0 answered, a1 never will
        wrap_runtime(gateway, held, noted)
        assert return_status(await mes.act(method, "J1")) == OK
        assert return_status(await mes.act("Clear", "J1")) == OK
        again = job_order("J1", work_masters=["WM-new"])
        assert return_status(await mes.store(again, method="StoreAndStart")) == OK
        await tried.wait()  # the new job order's start was tried (it may wait, as it should)
        release.set()  # the stopped run reports now
        final: dict[str, Any] = {}

        async def ended() -> bool:
            final.update((await mes.job_response("J1")).data.get("JobResponse") or {})
            return state_of(final)[:1] == ["Ended"]

        await poll_until(ended)
    assert state_of(final)[:2] == ["Ended", "Completed"]
    assert data_of(final)["b0"] == {"ok": True}
    assert "a0" not in data_of(final)
