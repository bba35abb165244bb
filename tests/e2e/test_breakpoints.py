"""Breakpoints through the whole gateway on real Redis and mosquitto: the MES sets one with its
CloudEvent, the job pauses (Interrupted.Suspended) before the step, says why, and Resume goes on."""

from __future__ import annotations

import subprocess
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.recipes import JobCommand, RecipeJob, RecipeProgress, RecipeViewer
from gateway.testing import poll_until, running, wait_until
from gateway.testing.cli import run_gateway
from gateway.testing.equipment import TestEquipment
from gateway_cycle.format import DATASCHEMA as CYCLE_DATASCHEMA
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    connect_mes,
    final_response,
    job_order,
    return_status,
    work_master,
)
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_sequence import DATASCHEMA
from gateway_simulator.testing import station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str
    equipment: TestEquipment = field(default_factory=TestEquipment)

    def gateway(self, **runtime: str) -> Gateway:
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance="a",
            simulator={},
            extra={
                "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
                **{f"GATEWAY_RUNTIME_{key.upper()}": value for key, value in runtime.items()},
            },
        )
        return Gateway.from_environment(None, environ, extra_plugins={"eq": self.equipment})

    def mes(self) -> AbstractAsyncContextManager[JobsMes]:
        return connect_mes(self.mqtt_url, self.name)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


async def gateway_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(partial(run_gateway, *args))


def step(name: str) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5}


RECIPE = {"steps": [step("a"), step("b"), step("c")]}


async def progress(gateway: Gateway, job: str = "J1") -> RecipeProgress | None:
    viewer = gateway.recipe_interpreters[DATASCHEMA]
    assert isinstance(viewer, RecipeViewer)
    return await viewer.progress("cell1", job)


async def state(mes: JobsMes, job: str = "J1") -> list[str]:
    return state_of((await mes.job_response(job)).data["JobResponse"])


async def suspended(mes: JobsMes) -> bool:
    return await state(mes) == ["Interrupted", "Suspended"]


def sent(equipment: TestEquipment) -> list[str]:
    return [command.correlation_id for command in equipment.received]


async def configure(mes: JobsMes) -> None:
    configured = await mes.configure("workmaster", work_master("WM", RECIPE, dataschema=DATASCHEMA))
    assert return_status(configured) == OK, configured.data


async def test_a_breakpoint_set_on_a_running_job_pauses_it_before_its_step_until_resume(
    station: Station,
) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"done": True}

    station.equipment.behaviours = {"com.example.a.v1": slow}
    async with running(gateway := station.gateway()), station.mes() as mes:
        await configure(mes)
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK
        await wait_until(lambda: station.equipment.received)  # a is out
        assert return_status(await mes.set_breakpoint("b", job="J1")) == OK
        release.set()
        await poll_until(lambda: suspended(mes))
        shown = await progress(gateway)
        assert shown is not None
        assert (shown.status, shown.paused_before, list(shown.breakpoints)) == (
            "paused",
            "b",
            ["b"],
        )
        assert sent(station.equipment) == ["J1:a:1"]  # b held back
        held = (await mes.job_response("J1")).data["JobResponse"]
        assert held["Description"]["Text"] == "Paused: breakpoint before b"  # the MES sees why
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:b:1", "J1:c:1"]


async def test_a_work_master_breakpoint_on_the_first_step_pauses_its_jobs_before_anything(
    station: Station,
) -> None:
    async with running(gateway := station.gateway()), station.mes() as mes:
        await configure(mes)
        assert return_status(await mes.set_breakpoint("a", work_master="WM")) == OK
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK
        await poll_until(lambda: suspended(mes))
        shown = await progress(gateway)
        assert shown is not None
        assert (shown.status, shown.paused_before) == ("paused", "a")
        assert sent(station.equipment) == []
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:b:1", "J1:c:1"]


async def test_a_breakpoint_on_an_unknown_step_or_job_is_refused_saying_why(
    station: Station,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await configure(mes)
        assert return_status(await mes.store(job_order("J1", work_masters=["WM"]))) == OK
        unknown_step = await mes.set_breakpoint("z", job="J1")
        unknown_job = await mes.set_breakpoint("a", job="J9")
        cleared = await mes.set_breakpoint("a", job="J1", enabled=False)
    assert return_status(unknown_step) == ReturnStatus.INVALID_REQUEST
    assert (
        unknown_step.errormessage == "unknown-step: 'z' is no step of the recipe (steps: a, b, c)"
    )
    assert return_status(unknown_job) == ReturnStatus.UNKNOWN_JOB_ORDER_ID
    assert return_status(cleared) == OK


async def test_gateway_jobs_breakpoint_sets_and_clears_one_from_the_command_line(
    station: Station,
) -> None:
    at = ["-s", "cell1", "--mqtt", station.mqtt_url, "--prefix", station.name]
    async with running(station.gateway()), station.mes() as mes:
        await configure(mes)
        assert return_status(await mes.store(job_order("J1", work_masters=["WM"]))) == OK
        done = await gateway_cli("jobs", "breakpoint", "c", "--job", "J1", *at)
        refused = await gateway_cli("jobs", "breakpoint", "z", "--work-master", "WM", *at)
        assert return_status(await mes.act("Start", "J1")) == OK
        await poll_until(lambda: suspended(mes))
        assert sent(station.equipment) == ["J1:a:1", "J1:b:1"]
        assert return_status(await mes.act("Resume", "J1")) == OK
        assert state_of(await final_response(mes))[:2] == ["Ended", "Completed"]
    assert (done.returncode, done.stdout.strip()) == (0, "breakpoint before c of job J1: set")
    assert refused.returncode == 1
    assert "unknown-step: 'z' is no step of the recipe" in refused.stderr


async def test_a_job_resumed_before_its_first_step_starts_even_when_the_hand_off_is_lost(
    station: Station,
) -> None:
    gateway = station.gateway(reconcile_seconds="0.2")
    coordinator = gateway.state.get(Coordinator)
    handed_off = coordinator.command_job

    async def lost(job: RecipeJob, command: JobCommand) -> None:
        if command is not JobCommand.RESUME:  # the Resume dies with its instance
            await handed_off(job, command)

    coordinator.command_job = lost  # type: ignore[method-assign]
    async with running(gateway), station.mes() as mes:
        await configure(mes)
        assert return_status(await mes.set_breakpoint("a", work_master="WM")) == OK
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK
        await poll_until(lambda: suspended(mes))
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)  # reconciliation started it
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:b:1", "J1:c:1"]


async def test_a_work_master_breakpoint_set_while_its_job_runs_pauses_that_job(
    station: Station,
) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"done": True}

    station.equipment.behaviours = {"com.example.a.v1": slow}
    async with running(station.gateway()), station.mes() as mes:
        await configure(mes)
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK
        await wait_until(lambda: station.equipment.received)
        assert return_status(await mes.set_breakpoint("c", work_master="WM")) == OK
        release.set()
        await poll_until(lambda: suspended(mes))
        assert sent(station.equipment) == ["J1:a:1", "J1:b:1"]
        assert return_status(await mes.set_breakpoint("c", work_master="WM", enabled=False)) == OK
        assert return_status(await mes.act("Resume", "J1")) == OK
        assert state_of(await final_response(mes))[:2] == ["Ended", "Completed"]


async def test_a_cycle_recipe_pauses_before_its_step_in_every_cycle(station: Station) -> None:
    recipe = {
        "cycles": 2,
        "commands": [
            {"name": "p", "type_id": "com.example.p.v1", "timeout_seconds": 5},
            {"name": "t", "type_id": "com.example.t.v1", "timeout_seconds": 5},
        ],
    }
    async with running(station.gateway()), station.mes() as mes:
        wm = work_master("WM", recipe, dataschema=CYCLE_DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        assert return_status(await mes.set_breakpoint("t", work_master="WM")) == OK
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK
        for cycle in (1, 2):
            await poll_until(lambda: suspended(mes))
            assert sent(station.equipment)[-1] == f"J1:p:{cycle}"  # t held back
            assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:p:1", "J1:t:1", "J1:p:2", "J1:t:2"]


async def test_a_step_held_at_a_breakpoint_can_be_replaced_and_its_replacement_runs(
    station: Station,
) -> None:
    async with running(gateway := station.gateway()), station.mes() as mes:
        await configure(mes)
        assert return_status(await mes.store(job_order("J1", work_masters=["WM"]))) == OK
        assert return_status(await mes.set_breakpoint("b", job="J1")) == OK
        assert return_status(await mes.act("Start", "J1")) == OK
        await poll_until(lambda: suspended(mes))
        replaced = await mes.edit_steps("J1", "replace", "b", step("y"))
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
        shown = await progress(gateway)
    assert return_status(replaced) == OK
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:y:1", "J1:c:1"]
    assert shown is not None
    assert shown.paused_before is None
