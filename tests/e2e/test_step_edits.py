"""Editing a job's pending steps through the whole gateway on real Redis and mosquitto: the MES
edits with its CloudEvent; the result, the recipe version and the method trace show the edit."""

from __future__ import annotations

import itertools
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.hookspecs import hookimpl
from gateway.recipes import recipe_version
from gateway.testing import poll_until, running, wait_until
from gateway.testing.cli import run_gateway
from gateway.testing.equipment import TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    connect_mes,
    final_response,
    job_order,
    return_status,
    work_master,
)
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from gateway_sequence import DATASCHEMA
from gateway_sfc.model import DATASCHEMA as SFC_DATASCHEMA
from gateway_simulator.testing import station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR


class MethodCalls:
    """The job methods answered, as the operator's trace records them (who, what, answer)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.messages: list[str | None] = []

    @hookimpl
    def gateway_job_method_called(
        self,
        scope: str,
        job_order_id: str,
        method: str,
        status: str,
        message: str | None,
        requested_by: str,
    ) -> None:
        self.calls.append((method, status, requested_by))
        self.messages.append(message)


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str
    equipment: TestEquipment = field(default_factory=TestEquipment)
    methods: MethodCalls = field(default_factory=MethodCalls)

    def gateway(self) -> Gateway:
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance="a",
            simulator={},
            extra={"GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01"},
        )
        plugins = {"eq": self.equipment, "calls": self.methods}
        return Gateway.from_environment(None, environ, extra_plugins=plugins)

    def mes(self) -> AbstractAsyncContextManager[JobsMes]:
        return connect_mes(self.mqtt_url, self.name)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def step(name: str) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5}


def sent(equipment: TestEquipment) -> list[str]:
    return [command.correlation_id for command in equipment.received]


async def store(mes: JobsMes, recipe: Any, *, start: bool) -> None:
    wm = work_master("WM", recipe, dataschema=DATASCHEMA)
    assert return_status(await mes.configure("workmaster", wm)) == OK
    method = "StoreAndStart" if start else "Store"
    assert return_status(await mes.store(job_order("J1", work_masters=["WM"]), method)) == OK


async def test_insert_replace_and_delete_on_a_running_sequence_show_in_its_result(
    station: Station,
) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"done": True}

    station.equipment.behaviours = {"com.example.a.v1": slow}
    recipe = {"steps": [step("a"), step("b"), step("c"), step("d")]}
    async with running(station.gateway()), station.mes() as mes:
        await store(mes, recipe, start=True)
        await wait_until(lambda: station.equipment.received)  # a has begun
        begun = await mes.edit_steps("J1", "replace", "a", step("z"))
        inserted = await mes.edit_steps("J1", "insert", "a", step("x"))
        replaced = await mes.edit_steps("J1", "replace", "b", step("y"))
        stale = await mes.edit_steps("J1", "delete", "c", expected=recipe_version(recipe))
        deleted = await mes.edit_steps("J1", "delete", "c")
        release.set()
        response = await final_response(mes)
    assert return_status(begun) == ReturnStatus.INVALID_REQUEST
    assert begun.errormessage == "edit: edit.step: step 'a' has begun: it cannot be edited"
    assert return_status(stale) == ReturnStatus.INVALID_REQUEST
    assert (stale.errormessage or "").startswith("RecipeVersion: conflict: the job runs sha256:")
    final = {"steps": [step("a"), step("x"), step("y"), step("d")]}
    assert [return_status(reply) for reply in (inserted, replaced, deleted)] == [OK, OK, OK]
    assert deleted.data["RecipeVersion"] == recipe_version(final)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    data = data_of(response)
    assert {"a", "x", "y", "d"} <= data.keys()
    assert not {"b", "c"} & data.keys()
    assert data["RecipeVersion"] == recipe_version(final)
    assert sent(station.equipment) == ["J1:a:1", "J1:x:1", "J1:y:1", "J1:d:1"]
    edits = [call for call in station.methods.calls if call[0] == "EditSteps"]
    assert edits == [
        ("EditSteps", "INVALID_REQUEST", "MES urn:test:mes"),
        ("EditSteps", "NO_ERROR", "MES urn:test:mes"),
        ("EditSteps", "NO_ERROR", "MES urn:test:mes"),
        ("EditSteps", "INVALID_REQUEST", "MES urn:test:mes"),
        ("EditSteps", "NO_ERROR", "MES urn:test:mes"),
    ]
    traced = [
        m
        for call, m in zip(station.methods.calls, station.methods.messages, strict=True)
        if call[0] == "EditSteps"
    ]
    assert traced[1] == f"insert x after a: {inserted.data['RecipeVersion']}"
    assert traced[4] == f"delete c: {recipe_version(final)}"


async def test_a_stored_sequence_is_edited_in_its_work_master_and_runs_as_edited(
    station: Station,
) -> None:
    recipe = {"steps": [step("a"), step("b")]}
    async with running(station.gateway()), station.mes() as mes:
        await store(mes, recipe, start=False)
        added = await mes.edit_steps("J1", "add", new=step("c"))
        reset_all = await mes.edit_steps("J1", "reset")  # nothing would be left to run
        unknown = await mes.edit_steps("J1", "delete", "q")
        deleted = await mes.edit_steps("J1", "delete", "a")
        assert return_status(await mes.act("Start", "J1")) == OK
        response = await final_response(mes)
    assert [return_status(reply) for reply in (added, deleted)] == [OK, OK]
    assert return_status(reset_all) == ReturnStatus.INVALID_REQUEST
    assert "would not compile" in (reset_all.errormessage or "")
    assert unknown.errormessage == "edit: edit.step: no step 'q' (steps: a, b, c)"
    assert data_of(response)["RecipeVersion"] == recipe_version({"steps": [step("b"), step("c")]})
    assert sent(station.equipment) == ["J1:b:1", "J1:c:1"]


async def test_reset_drops_every_step_not_begun_and_the_job_completes_after_the_current_one(
    station: Station,
) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"done": True}

    station.equipment.behaviours = {"com.example.a.v1": slow}
    async with running(station.gateway()), station.mes() as mes:
        await store(mes, {"steps": [step("a"), step("b"), step("c")]}, start=True)
        await wait_until(lambda: station.equipment.received)
        assert return_status(await mes.edit_steps("J1", "reset")) == OK
        release.set()
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1"]


async def test_gateway_jobs_edit_inserts_a_step_from_a_file(
    station: Station, tmp_path: Path
) -> None:
    new_step = tmp_path / "x.yaml"
    new_step.write_text("name: x\ntype_id: com.example.x.v1\ntimeout_seconds: 5\n")
    at = ["-s", "cell1", "--mqtt", station.mqtt_url, "--prefix", station.name]
    async with running(station.gateway()), station.mes() as mes:
        await store(mes, {"steps": [step("a"), step("b")]}, start=False)
        done = await anyio.to_thread.run_sync(
            partial(run_gateway, "jobs", "edit", "J1", "insert", "a", "--new", str(new_step), *at)
        )
    final = {"steps": [step("a"), step("x"), step("b")]}
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == f"insert J1: done, recipe {recipe_version(final)}"


def chart_action(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "interaction": "push_command",
        "type_id": f"com.example.{name}.v1",
        "timeout_seconds": 5,
    }


def chart(*names: str) -> dict[str, Any]:
    """Init -> one step per name (its action of the same name, lower case) -> Done."""
    steps = [{"name": "Init", "initial": True}, *({"name": n.upper()} for n in names)]
    order = ["Init", *(n.upper() for n in names), "Done"]
    return {
        "steps": [*steps, {"name": "Done"}],
        "transitions": [
            {"source": source, "target": target, "condition": "always"}
            for source, target in itertools.pairwise(order)
        ],
        "actions": [{**chart_action(n), "step": n.upper()} for n in names],
    }


async def test_a_queued_sfc_job_takes_insert_replace_and_delete_a_running_one_steps_not_reached(
    station: Station,
) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"done": True}

    station.equipment.behaviours = {"com.example.a.v1": slow}
    async with running(station.gateway()), station.mes() as mes:
        assert return_status(await mes.configure("online", {"Online": False})) == OK
        wm = work_master("WM", chart("a", "b", "c"), dataschema=SFC_DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK  # queued: the scope is offline
        x, y, z = ({"name": n.upper(), "actions": [chart_action(n)]} for n in "xyz")
        inserted = await mes.edit_steps("J1", "insert", "A", x)
        replaced = await mes.edit_steps("J1", "replace", "B", y)
        deleted = await mes.edit_steps("J1", "delete", "C")
        assert return_status(await mes.configure("online", {"Online": True})) == OK
        await wait_until(lambda: station.equipment.received)  # A is active
        reached = await mes.edit_steps("J1", "delete", "A")
        after_active = await mes.edit_steps("J1", "insert", "A", z)
        release.set()
        response = await final_response(mes)
    assert [return_status(reply) for reply in (inserted, replaced, deleted)] == [OK, OK, OK]
    assert return_status(reached) == ReturnStatus.INVALID_REQUEST
    assert reached.errormessage == (
        "edit: edit.step: step 'A' has been reached: cannot edit it (SFC: only the steps a "
        "running job has not reached)"
    )
    assert return_status(after_active) == OK
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["RecipeVersion"] == after_active.data["RecipeVersion"]
    assert sent(station.equipment) == ["J1:a:1", "J1:z:1", "J1:x:1", "J1:y:1"]


async def test_a_job_paused_before_its_first_step_runs_its_edited_steps(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        wm = work_master("WM", {"steps": [step("a"), step("b")]}, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        assert return_status(await mes.set_breakpoint("a", work_master="WM")) == OK
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == OK

        async def suspended() -> bool:
            reply = await mes.job_response("J1")
            return bool(state_of(reply.data["JobResponse"]) == ["Interrupted", "Suspended"])

        await poll_until(suspended)  # parked: its recipe has not started
        replaced = await mes.edit_steps("J1", "replace", "a", step("z"))
        assert return_status(await mes.set_breakpoint("a", work_master="WM", enabled=False)) == OK
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
    assert return_status(replaced) == OK
    assert data_of(response)["RecipeVersion"] == recipe_version({"steps": [step("z"), step("b")]})
    assert sent(station.equipment) == ["J1:z:1", "J1:b:1"]
