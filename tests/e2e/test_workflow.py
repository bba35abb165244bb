"""The workflow model end to end, in both formats: rollback, acknowledged failure, step policies.

Real mosquitto and Redis; the MES over MQTT; the equipment is ``TestEquipment`` (a real driver
whose failures each test scripts). The same clamp-then-tighten recipe is written as a sequence
and as an SFC chart: the tightening fails, the runtime unclamps, and the Job Response says
whether that made the station safe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentReply
from gateway.recipes import RecipeViewer
from gateway.testing import poll_until, running
from gateway.testing.cli import run_gateway
from gateway.testing.equipment import EquipmentFailure, NoAnswer, TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    connect_mes,
    final_response,
    return_status,
    store_and_start,
)
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_sfc.model import DATASCHEMA as SFC
from gateway_simulator.testing import station_environ
from gateway_ui.trace import read_trace

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

CLAMP = "com.example.clamp.v1"
UNCLAMP = "com.example.unclamp.v1"
TIGHTEN = "com.example.tighten.v1"
UNDO = {"name": "unclamp", "type_id": UNCLAMP, "timeout_seconds": 2}

SEQUENCE_RECIPE = {
    "timeout_seconds": 5,
    "steps": [
        {"name": "clamp", "type_id": CLAMP, "equipment": "clamp1", "compensation": UNDO},
        {"name": "tighten", "type_id": TIGHTEN, "equipment": "nutrunner1"},
    ],
}
SFC_RECIPE = {
    "steps": [{"name": "Clamp", "initial": True}, {"name": "Tighten"}, {"name": "Done"}],
    "transitions": [
        {"source": "Clamp", "target": "Tighten", "condition": "always"},
        {"source": "Tighten", "target": "Done", "condition": "always"},
    ],
    "actions": [
        {
            "name": "clamp",
            "step": "Clamp",
            "interaction": "push_command",
            "type_id": CLAMP,
            "equipment": "clamp1",
            "timeout_seconds": 5,
            "compensation": UNDO,
        },
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": TIGHTEN,
            "equipment": "nutrunner1",
            "timeout_seconds": 5,
        },
    ],
}
FORMATS = pytest.mark.parametrize(
    ("dataschema", "recipe"), [(SEQUENCE, SEQUENCE_RECIPE), (SFC, SFC_RECIPE)], ids=["seq", "sfc"]
)


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str
    equipment: TestEquipment = field(default_factory=TestEquipment)

    def gateway(self, **extra: str) -> Gateway:
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            simulator={},  # off: the equipment is the test's
            extra={"GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01", **extra},
        )
        return Gateway.from_environment(None, environ, extra_plugins={"eq": self.equipment})

    def mes(self) -> AbstractAsyncContextManager[JobsMes]:
        return connect_mes(self.mqtt_url, self.name)

    def sent(self) -> list[tuple[str, str | None]]:
        return [(command.type, command.equipment) for command in self.equipment.received]


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def fails(message: str) -> Any:
    def behaviour(command: EquipmentCommand) -> Any:
        raise EquipmentFailure(message)

    return behaviour


@FORMATS
async def test_a_failed_tightening_is_compensated_by_an_unclamp_and_ends_safe(
    station: Station, dataschema: str, recipe: dict[str, Any]
) -> None:
    station.equipment.behaviours = {TIGHTEN: fails("torque not reached")}
    async with running(station.gateway()), station.mes() as mes:
        await store_and_start(mes, recipe, dataschema=dataschema)
        response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    data = results(response)
    assert data["SideEffects"] is False
    assert data["Rollback"] == "FAILED_SAFE"
    assert data["Compensations"] == [
        {"action": "clamp", "compensation": "unclamp", "outcome": "done"}
    ]
    assert "torque not reached" in data["Error"]
    # Undone after the failure, on the clamp's own equipment.
    assert station.sent() == [(CLAMP, "clamp1"), (TIGHTEN, "nutrunner1"), (UNCLAMP, "clamp1")]


@FORMATS
async def test_a_failing_unclamp_ends_the_job_unsafe(
    station: Station, dataschema: str, recipe: dict[str, Any]
) -> None:
    station.equipment.behaviours = {TIGHTEN: fails("torque not reached"), UNCLAMP: fails("jammed")}
    async with running(station.gateway()), station.mes() as mes:
        await store_and_start(mes, recipe, dataschema=dataschema)
        response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    data = results(response)
    assert data["SideEffects"] is True
    assert data["Rollback"] == "FAILED_UNSAFE"
    assert data["Compensations"] == [
        {"action": "clamp", "compensation": "unclamp", "outcome": "failed", "error": "jammed"}
    ]
    assert data["Error"].endswith("rollback failed: unclamp: jammed")


def fails_for(job: str, message: str) -> Any:
    """Fails the commands of ``job``; the other jobs' succeed."""

    def behaviour(command: EquipmentCommand) -> Any:
        if command.job_order_id == job:
            raise EquipmentFailure(message)
        return {"ok": True}

    return behaviour


async def waiting_for(gateway: Gateway, job: str) -> Sequence[str]:
    """The blocked equipment ``job`` waits for in the queue, once it is queued."""
    found: list[Sequence[str]] = []

    async def queued() -> bool:
        queue = await gateway.job_control.queue("cell1")
        found[:] = [entry.blocked for entry in queue.waiting if entry.job_order_id == job]
        return bool(found)

    await poll_until(queued)
    return found[0]


async def test_an_unsafe_failure_blocks_its_equipment_until_acknowledged(
    station: Station,
) -> None:
    station.equipment.behaviours = {
        TIGHTEN: fails_for("J1", "torque not reached"),
        UNCLAMP: fails_for("J1", "jammed"),
    }
    at = ["-s", "cell1", "--mqtt", station.mqtt_url, "--prefix", station.name]
    async with running(station.gateway()) as gateway, station.mes() as mes:
        await store_and_start(mes, SEQUENCE_RECIPE, "J1", dataschema=SEQUENCE)
        assert results(await final_response(mes, "J1"))["Rollback"] == "FAILED_UNSAFE"
        await store_and_start(mes, SEQUENCE_RECIPE, "J2", dataschema=SEQUENCE)
        assert await waiting_for(gateway, "J2") == ["clamp1", "nutrunner1"]
        queue = await gateway.job_control.queue("cell1")
        assert queue.blocked["clamp1"].startswith("job J1 failed unsafe: step tighten: ")
        retained = await mes.queue(until=lambda document: bool(document.get("Blocked")))
        assert [item["EquipmentID"] for item in retained["Blocked"]] == ["clamp1", "nutrunner1"]
        assert retained["Blocked"][0]["JobOrderID"] == "J1"

        # An operator at the station acknowledges the clamp; the nutrunner stays blocked.
        done = await anyio.to_thread.run_sync(
            partial(run_gateway, "scope", "acknowledge", "clamp1", "--by", "Ana", *at)
        )
        assert (done.returncode, done.stdout) == (0, "scope cell1: clamp1 acknowledged by Ana\n")
        assert await waiting_for(gateway, "J2") == ["nutrunner1"]
        # The MES acknowledges the rest (config.acknowledgement, every blocked equipment).
        reply = await mes.configure("acknowledgement", {"AcknowledgedBy": "MES shift lead"})
        assert return_status(reply) == ReturnStatus.NO_ERROR
        assert states(await final_response(mes, "J2"))[:2] == ["Ended", "Completed"]
        acknowledged = results(await final_response(mes, "J1"))["Acknowledged"]
        traced = await acknowledgements_traced(gateway, "J1", count=2)
    # The last acknowledgement is traced in the failed job's Job Response, with who gave it.
    assert acknowledged["By"] == "MES shift lead"
    assert acknowledged["Equipment"] == ["nutrunner1"]
    # Each one is in the failed job's trace (the web UI's), with who gave it and what it released.
    assert traced == [
        ("Ana", "released clamp1"),
        ("MES shift lead", "released nutrunner1"),
    ]


async def acknowledgements_traced(
    gateway: Gateway, job: str, *, count: int
) -> list[tuple[str, str]]:
    """The acknowledgements in ``job``'s trace, once there are ``count`` of them: (who, what)."""
    assert gateway.store is not None
    store = gateway.store
    found: list[tuple[str, str]] = []

    async def written() -> bool:
        entries = await read_trace(store, "cell1", job)
        found[:] = [
            (entry["requested_by"], entry["message"])
            for entry in entries
            if entry["kind"] == "method" and entry["method"] == "Acknowledge"
        ]
        return len(found) >= count

    await poll_until(written)
    return found


async def test_a_station_may_choose_not_to_block(station: Station) -> None:
    station.equipment.behaviours = {
        TIGHTEN: fails_for("J1", "torque not reached"),
        UNCLAMP: fails_for("J1", "jammed"),
    }
    off = station.gateway(GATEWAY_JOBS_BLOCK_UNSAFE_FAILURES="false")
    async with running(off), station.mes() as mes:
        await store_and_start(mes, SEQUENCE_RECIPE, "J1", dataschema=SEQUENCE)
        assert results(await final_response(mes, "J1"))["Rollback"] == "FAILED_UNSAFE"
        await store_and_start(mes, SEQUENCE_RECIPE, "J2", dataschema=SEQUENCE)
        assert states(await final_response(mes, "J2"))[:2] == ["Ended", "Completed"]


MEASURE = "com.example.measure.v1"
REWORK = "com.example.rework.v1"
POLICY_SEQUENCE = {
    "timeout_seconds": 5,
    "steps": [
        {
            "name": "measure",
            "type_id": MEASURE,
            "assertion": "torque >= 80",
            "continue_on_error": True,
        },
        {"name": "rework", "type_id": REWORK, "condition": "measure.torque < 80"},
        {"name": "skipped", "type_id": REWORK, "condition": "measure.torque >= 80"},
    ],
}
POLICY_SFC = {
    "steps": [
        {"name": "Measure", "initial": True},
        {"name": "Rework"},
        {"name": "Skipped"},
    ],
    "transitions": [
        {"source": "Measure", "target": "Rework"},
        {"source": "Rework", "target": "Skipped"},
    ],
    "actions": [
        {
            "name": "measure",
            "step": "Measure",
            "interaction": "push_command",
            "type_id": MEASURE,
            "timeout_seconds": 5,
            "assertion": "torque >= 80",
            "on_error": "continue",
        },
        {
            "name": "rework",
            "step": "Rework",
            "interaction": "push_command",
            "type_id": REWORK,
            "timeout_seconds": 5,
            "condition": "measure.torque < 80",
        },
        {
            "name": "skipped",
            "step": "Skipped",
            "interaction": "push_command",
            "type_id": REWORK,
            "timeout_seconds": 5,
            "condition": "measure.torque >= 80",
        },
    ],
}


@pytest.mark.parametrize(
    ("dataschema", "recipe"), [(SEQUENCE, POLICY_SEQUENCE), (SFC, POLICY_SFC)], ids=["seq", "sfc"]
)
async def test_an_assertion_a_failure_that_goes_on_and_conditions_in_both_formats(
    station: Station, dataschema: str, recipe: dict[str, Any]
) -> None:
    station.equipment.behaviours = {MEASURE: lambda command: {"torque": 70}}
    async with running(station.gateway()), station.mes() as mes:
        await store_and_start(mes, recipe, dataschema=dataschema)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert results(response)["measure"] == {"torque": 70}  # refused by its assertion, kept
    # The failed measurement did not stop the job; the rework its condition picked ran, the
    # step whose condition was false sent nothing.
    assert [command.action for command in station.equipment.received] == ["measure", "rework"]


NUTRUNNERS = ["nr1", "nr2", "nr3", "nr4"]


def fan_out_recipe(dataschema: str, policy: Any) -> dict[str, Any]:
    """Tighten on every nutrunner the scope declares, then release."""
    fan_out = {"members": "declared", "policy": policy}
    if dataschema == SEQUENCE:
        return {
            "timeout_seconds": 5,
            "steps": [
                {"name": "tighten", "type_id": TIGHTEN, "fan_out": fan_out},
                {
                    "name": "release",
                    "type_id": CLAMP,
                    "equipment": "clamp1",
                    "condition": "count(tighten) >= 3",  # three of the four tightened
                },
            ],
        }
    return {
        "steps": [{"name": "Tighten", "initial": True}, {"name": "Release"}],
        "transitions": [{"source": "Tighten", "target": "Release"}],
        "actions": [
            {
                "name": "tighten",
                "step": "Tighten",
                "interaction": "push_command",
                "type_id": TIGHTEN,
                "timeout_seconds": 5,
                "fan_out": fan_out,
            },
            {
                "name": "release",
                "step": "Release",
                "interaction": "push_command",
                "type_id": CLAMP,
                "equipment": "clamp1",
                "timeout_seconds": 5,
                "condition": "count(tighten) >= 3",
            },
        ],
    }


async def declare_nutrunners(mes: JobsMes) -> None:
    equipment = [
        {"ID": name, "Properties": [{"ID": "TypeIds", "Value": [TIGHTEN]}]} for name in NUTRUNNERS
    ]
    assert return_status(await mes.configure("equipment", equipment)) == ReturnStatus.NO_ERROR


def nr3_fails(command: EquipmentCommand) -> Any:
    if command.equipment == "nr3":
        raise EquipmentFailure("torque not reached", {"torque": 61.0})
    return {"torque": 85.0}


@pytest.mark.parametrize(
    ("dataschema", "policy", "ended"),
    [
        (SEQUENCE, "all", "Aborted"),
        (SEQUENCE, "any", "Ended"),
        (SEQUENCE, 3, "Ended"),
        (SFC, "all", "Aborted"),
        (SFC, 3, "Ended"),
    ],
    ids=["seq-all", "seq-any", "seq-3", "sfc-all", "sfc-3"],
)
async def test_a_fan_out_over_four_nutrunners_with_one_failing(
    station: Station, dataschema: str, policy: Any, ended: str
) -> None:
    station.equipment.behaviours = {TIGHTEN: nr3_fails}
    async with running(station.gateway()), station.mes() as mes:
        await declare_nutrunners(mes)
        await store_and_start(mes, fan_out_recipe(dataschema, policy), dataschema=dataschema)
        response = await final_response(mes)
    assert states(response)[0] == ended
    tightened = results(response)["tighten"]  # one entry per member
    assert tightened["nr1"] == {"torque": 85.0}
    assert tightened["nr3"] == {"error": "torque not reached", "data": {"torque": 61.0}}
    sent = sorted(c.correlation_id for c in station.equipment.received if c.type == TIGHTEN)
    assert sent == [f"J1:tighten@{name}:1" for name in NUTRUNNERS]
    if ended == "Aborted":
        # Decided as nr3 failed: "all" could no longer be met (the members still out were
        # cancelled), however many had succeeded by then.
        error = results(response)["Error"]
        assert re.search(r"\d of 4 succeeded, 4 needed \(nr3: torque not reached\)$", error)
    else:
        assert [c.action for c in station.equipment.received][-1] == "release"


async def test_a_fan_out_holds_every_member_while_its_job_runs(station: Station) -> None:
    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer  # answered below, once the allocation is looked at

    station.equipment.behaviours = {TIGHTEN: silent}
    async with running(station.gateway()) as gateway, station.mes() as mes:
        await declare_nutrunners(mes)
        await store_and_start(mes, fan_out_recipe(SEQUENCE, "all"), dataschema=SEQUENCE)

        def out() -> list[EquipmentCommand]:
            return [c for c in station.equipment.received if c.type == TIGHTEN]

        async def all_out() -> bool:
            return len(out()) == 4

        await poll_until(all_out)
        held = (await gateway.job_control.queue("cell1")).running["J1"]
        for command in out():
            reply = EquipmentReply(command.correlation_id, data={"torque": 85.0}, scope="cell1")
            await gateway.equipment.reply(reply)
        response = await final_response(mes)
    assert set(held) >= {*NUTRUNNERS, "clamp1"}
    assert states(response)[:2] == ["Ended", "Completed"]
    assert set(results(response)["tighten"]) == set(NUTRUNNERS)


INSERT = "com.example.insert.v1"
BENCH_TEST = "com.example.bench_test.v1"


SLOTS = {"members": ["slot1", "slot2", "slot3"], "policy": 2}
PIPELINE_STEPS = [{"name": "insert", "type_id": INSERT}, {"name": "bench", "type_id": BENCH_TEST}]
PIPELINE_SEQUENCE = {
    "timeout_seconds": 5,
    "steps": [
        {"name": "per_slot", "fan_out": SLOTS, "steps": PIPELINE_STEPS},
        {"name": "release", "type_id": CLAMP, "equipment": "clamp1"},
    ],
}
PIPELINE_CHART = {
    "steps": [{"name": "Test", "initial": True}, {"name": "Release"}, {"name": "Done"}],
    "transitions": [
        {"source": "Test", "target": "Release"},
        {"source": "Release", "target": "Done"},
    ],
    "actions": [
        {
            "name": "per_slot",
            "step": "Test",
            "interaction": "push_command",
            "timeout_seconds": 5,
            "fan_out": SLOTS,
            "pipeline": PIPELINE_STEPS,
        },
        {
            "name": "release",
            "step": "Release",
            "interaction": "push_command",
            "type_id": CLAMP,
            "equipment": "clamp1",
            "timeout_seconds": 5,
        },
    ],
}


@pytest.mark.parametrize(
    ("dataschema", "recipe"),
    [(SEQUENCE, PIPELINE_SEQUENCE), (SFC, PIPELINE_CHART)],
    ids=["seq", "sfc"],
)
async def test_a_per_member_pipeline_where_one_member_fails_and_the_others_complete(
    station: Station, dataschema: str, recipe: dict[str, Any]
) -> None:
    """A test bench: each slot inserts, then tests, on its own; slot2 has no part, which stops
    its pipeline alone. The same recipe as a sequence and as an SFC chart."""

    def insert(command: EquipmentCommand) -> Any:
        if command.equipment == "slot2":
            raise EquipmentFailure("no part")
        return {"inserted": True}

    station.equipment.behaviours = {
        INSERT: insert,
        BENCH_TEST: lambda command: {"passed": True},
    }
    async with running(station.gateway()), station.mes() as mes:
        await store_and_start(mes, recipe, dataschema=dataschema)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    per_slot = results(response)["per_slot"]
    assert per_slot["slot1"] == {"insert": {"inserted": True}, "bench": {"passed": True}}
    assert per_slot["slot2"] == {"error": "insert: no part", "data": None, "results": {}}
    sent = sorted(c.correlation_id for c in station.equipment.received if c.type == BENCH_TEST)
    assert sent == ["J1:bench@slot1:1", "J1:bench@slot3:1"]  # slot2 never got that far


async def test_a_rollback_under_way_when_its_gateway_stops_is_resumed_by_the_next(
    station: Station,
) -> None:
    """The gateway stops while the unclamp is out (its equipment silent); the next one resumes
    the rollback from the stored state: the same unclamp is sent again (same correlation id),
    answered, and the job ends once, FAILED_SAFE."""
    unclamps: list[str] = []

    def unclamp(command: EquipmentCommand) -> Any:
        unclamps.append(command.correlation_id)
        if len(unclamps) == 1:
            raise NoAnswer  # the first gateway stops before any answer
        return {"open": True}

    station.equipment.behaviours = {TIGHTEN: fails("torque not reached"), UNCLAMP: unclamp}
    async with station.mes() as mes:
        async with running(station.gateway()) as first:
            await store_and_start(mes, SEQUENCE_RECIPE, dataschema=SEQUENCE)

            async def out() -> bool:
                return bool(unclamps)

            await poll_until(out)
            viewer = first.recipe_interpreters[SEQUENCE]
            assert isinstance(viewer, RecipeViewer)
            progress = await viewer.progress("cell1", "J1")
            assert progress is not None
            assert progress.status == "compensating"
        async with running(station.gateway()):
            response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    data = results(response)
    assert (data["Rollback"], data["SideEffects"]) == ("FAILED_SAFE", False)
    assert data["Compensations"] == [
        {"action": "clamp", "compensation": "unclamp", "outcome": "done"}
    ]
    assert unclamps == ["J1:unclamp:1", "J1:unclamp:1"]  # sent again, the same try


async def test_the_mes_abort_holds_the_equipment_until_the_rollback_says_it_is_safe(
    station: Station,
) -> None:
    """The MES aborts a held job: its end frees the clamp at once, but the clamp is held for
    the rollback (no job may take it meanwhile) and released once the unclamp succeeded."""
    held_recipe = {**SEQUENCE_RECIPE, "on_error": "hold"}

    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer  # answered below

    station.equipment.behaviours = {TIGHTEN: fails("torque not reached"), UNCLAMP: silent}
    async with running(station.gateway()) as gateway, station.mes() as mes:
        await store_and_start(mes, held_recipe, dataschema=SEQUENCE)
        await until(mes, "J1", "Interrupted")
        assert return_status(await mes.act("Abort", "J1")) == ReturnStatus.NO_ERROR

        async def unclamp_out() -> bool:
            return any(c.type == UNCLAMP for c in station.equipment.received)

        await poll_until(unclamp_out)
        queue = await gateway.job_control.queue("cell1")
        assert queue.blocked["clamp1"] == "job J1 is being rolled back (aborted by the MES)"
        [unclamp] = [c for c in station.equipment.received if c.type == UNCLAMP]
        await gateway.equipment.reply(
            EquipmentReply(unclamp.correlation_id, data={"open": True}, scope="cell1")
        )

        async def released() -> bool:
            return not (await gateway.job_control.queue("cell1")).blocked

        await poll_until(released)
        data = results(await final_response(mes))
    assert data["Rollback"] == "FAILED_SAFE"
    assert data["SideEffects"] is False


async def until(mes: JobsMes, job: str, top: str) -> None:
    async def reached() -> bool:
        response = (await mes.job_response(job)).data["JobResponse"]
        return states(response)[:1] == [top]

    await poll_until(reached)


async def test_a_fan_out_is_undone_on_each_member_that_succeeded(station: Station) -> None:
    untighten = "com.example.untighten.v1"
    recipe = {
        "timeout_seconds": 5,
        "steps": [
            {
                "name": "tighten",
                "type_id": TIGHTEN,
                "fan_out": {"members": "declared", "policy": "any"},
                "compensation": {"name": "untighten", "type_id": untighten},
            },
            {"name": "release", "type_id": CLAMP, "equipment": "clamp1"},
        ],
    }
    # nr3 fails its tightening ("any" goes on), then the release fails the job.
    station.equipment.behaviours = {TIGHTEN: nr3_fails, CLAMP: fails("jammed")}
    async with running(station.gateway()), station.mes() as mes:
        await declare_nutrunners(mes)
        await store_and_start(mes, recipe, dataschema=SEQUENCE)
        response = await final_response(mes)
    data = results(response)
    assert (data["Rollback"], data["SideEffects"]) == ("FAILED_SAFE", False)
    undone = sorted(
        (c.correlation_id, c.equipment) for c in station.equipment.received if c.type == untighten
    )
    assert undone == [(f"J1:untighten@{m}:1", m) for m in ("nr1", "nr2", "nr4")]
    assert {entry["outcome"] for entry in data["Compensations"]} == {"done"}
