"""Sequences through the recipe runtime on real Redis and mosquitto: job control, instances.

The MES talks MQTT to the gateway; the equipment is ``TestEquipment`` (a real driver whose
behaviour each test scripts), so every answer, failure and silence is the test's choice. What
the runtime does for every format alike (reconciliation, scopes, timers after a restart) is
tested with the runtime; here, what a sequence asks of it.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentReply
from gateway.jobstates import JobState
from gateway.recipes import RecipeProgress, RecipeViewer
from gateway.testing import poll_until, running, wait_until
from gateway.testing.equipment import EquipmentFailure, NoAnswer, TestEquipment
from gateway.testing.redis_ha import grown_since, lasting_keys
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    complete_and_clear,
    connect_mes,
    final_response,
    return_status,
    store_and_start,
    work_master,
)
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from gateway_sequence import DATASCHEMA
from gateway_sfc.model import DATASCHEMA as SFC_DATASCHEMA
from gateway_simulator.testing import station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str
    equipment: TestEquipment = field(default_factory=TestEquipment)

    def gateway(self, instance: str = "a", **runtime: str) -> Gateway:
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance=instance,
            simulator={},  # off: the equipment is the test's
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


def step(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type_id": f"com.example.{name}.v1", "timeout_seconds": 5, **fields}


async def start(mes: JobsMes, recipe: Any, job: str = "J1", dataschema: str = DATASCHEMA) -> None:
    await store_and_start(mes, recipe, job, dataschema=dataschema)


async def response_of(mes: JobsMes, job: str) -> dict[str, Any]:
    response: dict[str, Any] = (await mes.job_response(job)).data["JobResponse"]
    return response


async def until_state(mes: JobsMes, job: str, *texts: str) -> dict[str, Any]:
    """The job's response once its state is ``texts`` (asked over MQTT: no event to wait on)."""

    async def reached() -> bool:
        return state_of(await response_of(mes, job)) == list(texts)

    await poll_until(reached)
    return await response_of(mes, job)


async def recorded(mes: JobsMes, job: str, result: str) -> bool:
    return result in data_of(await response_of(mes, job))


async def progress(gateway: Gateway, job: str) -> RecipeProgress | None:
    """The job's progress as the web UI shows it."""
    viewer = gateway.recipe_interpreters[DATASCHEMA]
    assert isinstance(viewer, RecipeViewer)
    return await viewer.progress("cell1", job)


async def paused(gateway: Gateway, job: str) -> bool:
    """Whether the runtime has applied the MES's Pause to the job's sequence (the job's state
    changes first, then the runtime takes the command from its work stream)."""
    shown = await progress(gateway, job)
    return shown is not None and shown.status == "paused"


def sent(equipment: TestEquipment) -> list[str]:
    return [command.correlation_id for command in equipment.received]


async def test_a_failed_step_that_holds_is_tried_again_on_the_mes_resume(station: Station) -> None:
    def fail_first(command: EquipmentCommand) -> Any:
        if command.correlation_id.endswith(":1"):
            raise EquipmentFailure("torque not reached")
        return {"torque": 85.1}

    station.equipment.behaviours = {"com.example.tighten.v1": fail_first}
    recipe = {"steps": [step("tighten", on_error="hold"), step("release")]}
    async with running(station.gateway()), station.mes() as mes:
        await start(mes, recipe)
        held = await until_state(mes, "J1", "Interrupted", "Held")
        assert held["Description"]["Text"] == "Held: step tighten: torque not reached"
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["tighten"] == {"torque": 85.1}
    assert sent(station.equipment) == ["J1:tighten:1", "J1:tighten:2", "J1:release:1"]


async def test_the_mes_abort_of_a_held_sequence_keeps_the_results_so_far(
    station: Station,
) -> None:
    def fail(command: EquipmentCommand) -> Any:
        raise EquipmentFailure("jammed")

    station.equipment.behaviours = {"com.example.b.v1": fail}
    recipe = {"on_error": "hold", "steps": [step("a"), step("b"), step("c")]}
    async with running(station.gateway()), station.mes() as mes:
        await start(mes, recipe)
        await until_state(mes, "J1", "Interrupted", "Held")
        assert return_status(await mes.act("Abort", "J1")) == OK
        # The job is Aborted at once; the sequence then records what it had (no event says so).
        await poll_until(lambda: recorded(mes, "J1", "a"))
        response = await final_response(mes)
    assert state_of(response) == ["Aborted"]
    assert data_of(response)["a"] == {"ok": True}  # a's reply, kept
    assert sent(station.equipment) == ["J1:a:1", "J1:b:1"]  # c never went out


async def test_a_timeout_aborts_the_job_saying_which_step_and_that_it_may_have_acted(
    station: Station,
) -> None:
    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment.behaviours = {"com.example.b.v1": silent}
    recipe = {"steps": [{"par": [step("a"), step("b", timeout_seconds=0.3)]}, step("c")]}
    async with running(station.gateway()), station.mes() as mes:
        await start(mes, recipe)
        response = await final_response(mes)
    assert state_of(response) == ["Aborted"]
    data = data_of(response)
    assert data["Error"] == "step b: no reply within 0.3 s"
    assert data["SideEffects"] is True
    assert data["a"] == {"ok": True}


async def test_a_job_id_cleared_and_stored_again_runs_its_new_sequence(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await start(mes, {"steps": [step("a")]})
        assert state_of(await final_response(mes))[:2] == ["Ended", "Completed"]
        assert return_status(await mes.act("Clear", "J1")) == OK
        await start(mes, {"steps": [step("b")]})
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert set(data_of(response)) >= {"b"}
    assert sent(station.equipment) == ["J1:a:1", "J1:b:1"]


async def test_pause_holds_back_the_next_block_until_resume(station: Station) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"done": True}

    station.equipment.behaviours = {"com.example.a.v1": slow}
    async with running(gateway := station.gateway()), station.mes() as mes:
        await start(mes, {"steps": [step("a"), step("b")]})
        await wait_until(lambda: station.equipment.received)
        assert return_status(await mes.act("Pause", "J1")) == OK
        await until_state(mes, "J1", "Interrupted", "Suspended")
        await poll_until(lambda: paused(gateway, "J1"))  # the runtime has applied it too
        release.set()  # a's reply comes while the job is paused
        await wait_until(lambda: "J1:a:1" in station.equipment.answered)
        assert sent(station.equipment) == ["J1:a:1"]  # b waits for the Resume
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:b:1"]


async def test_the_progress_shows_the_par_block_active_and_each_steps_try(
    station: Station,
) -> None:
    """The web UI's view of a sequence: the block that runs (a par block as a branch) and the
    steps it ran, in recipe order, from the state and the job's history."""
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"slow": True}

    station.equipment.behaviours = {"com.example.c.v1": slow}
    recipe = {"steps": [step("a"), {"name": "both", "par": [step("b"), step("c")]}, step("d")]}
    async with running(gateway := station.gateway()), station.mes() as mes:
        await start(mes, recipe)
        await wait_until(lambda: "J1:b:1" in station.equipment.answered)
        shown = await progress(gateway, "J1")
        release.set()
        await final_response(mes)
    assert shown is not None
    assert [(node.name, node.branch) for node in shown.active] == [("both", True)]
    assert [(a.name, a.step, a.phase, a.max_attempts) for a in shown.actions] == [
        ("a", "a", "done", 1),
        ("b", "both", "done", 1),
        ("c", "both", "dispatched", 1),
    ]
    assert shown.results == {"a": {"ok": True}, "b": {"ok": True}}


async def test_another_instance_continues_a_sequence_its_first_instance_left(
    station: Station,
) -> None:
    """Everything a sequence needs is in Redis: the timeout of a command instance a sent fires
    on instance b, which sends the next try, takes the reply and completes the job."""

    def silent_first(command: EquipmentCommand) -> Any:
        if command.correlation_id.endswith(":1"):
            raise NoAnswer
        return {"second": True}

    station.equipment.behaviours = {"com.example.a.v1": silent_first}
    recipe = {"steps": [step("a", timeout_seconds=0.5, max_attempts=2), step("b")]}
    async with running(station.gateway("a")), station.mes() as mes:
        await start(mes, recipe)
        await wait_until(lambda: station.equipment.received)
    # Asked through b's job control, not over MQTT: the broker keeps a's session in the MES
    # commands' share group, and would hand it some of the MES's requests.
    async with running(b := station.gateway("b")):

        async def completed() -> bool:
            return await b.job_control.state("cell1", "J1") is JobState.COMPLETED

        await poll_until(completed)
        response = await b.job_control.response("cell1", "J1")
    assert response is not None
    # b's recovery scan may send try 1 again (the same correlation id); its timeout made try 2.
    assert list(dict.fromkeys(sent(station.equipment))) == ["J1:a:1", "J1:a:2", "J1:b:1"]
    assert data_of(response)["a"] == {"second": True}


async def test_a_command_whose_publication_failed_is_sent_again(station: Station) -> None:
    """The broker is away when the command should go out: the command was stored as sent, so
    it goes out again (same correlation id) after the grace time, and the job completes."""
    failures = [ConnectionError("broker away")]

    def flaky(command: EquipmentCommand) -> Any:
        if failures:
            raise failures.pop()
        return {"ok": True}

    station.equipment.behaviours = {"com.example.a.v1": flaky}
    async with running(station.gateway(outbox_grace_seconds="0.2")), station.mes() as mes:
        await start(mes, {"steps": [step("a")]})
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:a:1"]


@pytest.mark.parametrize("named", [True, False], ids=["equipment-named", "routed-by-type"])
async def test_equipment_coming_back_online_gets_the_commands_it_may_have_missed(
    station: Station, named: bool
) -> None:
    """Whether the step names the equipment or its type routes it there."""

    def missed_first(command: EquipmentCommand) -> Any:
        if len(station.equipment.sent("com.example.a.v1")) == 1:
            raise NoAnswer  # the first delivery got lost while the equipment was away
        return {"ok": True}

    station.equipment.behaviours = {"com.example.a.v1": missed_first}
    where = {"equipment": "press"} if named else {}
    async with running(gateway := station.gateway()), station.mes() as mes:
        press = {"ID": "press", "Properties": [{"ID": "TypeIds", "Value": ["com.example.a.v1"]}]}
        assert return_status(await mes.configure("equipment", [press])) == ReturnStatus.NO_ERROR
        await start(mes, {"steps": [step("a", timeout_seconds=30, **where)]})
        await wait_until(lambda: station.equipment.received)
        assert station.equipment.received[0].equipment == "press"
        await gateway.equipment.heartbeat("press")  # its first heartbeat: it came online
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert sent(station.equipment) == ["J1:a:1", "J1:a:1"]  # the same command, again


async def test_a_timeout_on_offline_equipment_says_so_when_the_type_routes_there(
    station: Station,
) -> None:
    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment.behaviours = {"com.example.a.v1": silent}
    async with running(gateway := station.gateway()), station.mes() as mes:
        press = {"ID": "press", "Properties": [{"ID": "TypeIds", "Value": ["com.example.a.v1"]}]}
        assert return_status(await mes.configure("equipment", [press])) == ReturnStatus.NO_ERROR
        await gateway.equipment.gone("press", "connection lost")
        await start(mes, {"steps": [step("a", timeout_seconds=0.3)]})
        response = await final_response(mes)
    assert state_of(response)[0] == "Aborted"
    assert "equipment press offline: connection lost" in data_of(response)["Error"]


async def test_an_invalid_sequence_is_refused_at_configuration_naming_the_problem(
    station: Station,
) -> None:
    recipe = {"steps": [step("a", timeout_seconds=-1)]}
    async with running(station.gateway()), station.mes() as mes:
        reply = await mes.configure("workmaster", work_master("WM", recipe, dataschema=DATASCHEMA))
    assert return_status(reply) != OK
    assert "recipe.steps[0].timeout_seconds: must be > 0" in (reply.errormessage or "")


async def test_an_sfc_chart_and_a_sequence_run_side_by_side_on_one_equipment_hub(
    station: Station,
) -> None:
    """One runtime runs both formats; each reply reaches the program of its job."""
    chart = {
        "steps": [{"name": "S", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "S", "target": "Done", "condition": "always"}],
        "actions": [
            {
                "name": "x",
                "step": "S",
                "interaction": "push_command",
                "type_id": "com.example.x.v1",
                "timeout_seconds": 5,
            }
        ],
    }
    async with running(station.gateway()), station.mes() as mes:
        await start(mes, chart, "CHART", dataschema=SFC_DATASCHEMA)
        await start(mes, {"steps": [{"par": [step("a"), step("b")]}]}, "SEQ")
        responses = [await final_response(mes, job) for job in ("CHART", "SEQ")]
    assert [state_of(r)[:2] for r in responses] == [["Ended", "Completed"]] * 2
    assert set(data_of(responses[1])) >= {"a", "b"}


async def test_a_sequence_run_and_cleared_leaves_nothing_that_lasts(station: Station) -> None:
    """What a run writes expires or goes with it (the job's scope for replies that do not
    say it), or the store grows with every job."""

    async with running(station.gateway()), station.mes() as mes:
        wm = work_master("WM", {"steps": [step("a")]}, dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        await complete_and_clear(mes, "J0", "WM")  # the station's own keys exist from here on
        before = await lasting_keys(station.redis_url, station.name)
        for job in ("J1", "J2", "J3"):
            await complete_and_clear(mes, job, "WM")
        assert await grown_since(station.redis_url, station.name, before) == {}


async def test_a_late_reply_to_an_earlier_run_of_the_job_id_is_not_taken_by_the_new_run(
    station: Station,
) -> None:
    """The runs of a job id number their tries on: a reply to the earlier run that comes late
    (the same job, step and try) does not answer the new run's command."""
    answers = iter([{"first": True}])

    def once_then_silent(command: EquipmentCommand) -> Any:
        answer = next(answers, None)
        if answer is None:
            raise NoAnswer
        return answer

    station.equipment.behaviours = {"com.example.a.v1": once_then_silent}
    recipe = {"steps": [step("a", timeout_seconds=60)]}
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        await start(mes, recipe)
        assert state_of(await final_response(mes))[:2] == ["Ended", "Completed"]
        assert return_status(await mes.act("Clear", "J1")) == OK
        await start(mes, recipe)
        await wait_until(lambda: len(station.equipment.received) == 2)

        await gateway.equipment.reply(EquipmentReply("J1:a:1", {"late": True}, scope="cell1"))
        assert await gateway.job_control.state("cell1", "J1") is JobState.RUNNING
        await gateway.equipment.reply(EquipmentReply("J1:a:2", {"second": True}, scope="cell1"))
        response = await final_response(mes)
    assert sent(station.equipment) == ["J1:a:1", "J1:a:2"]
    assert data_of(response)["a"] == {"second": True}


async def test_conditions_assertions_and_error_policies_through_the_runtime(
    station: Station,
) -> None:
    """A measurement its assertion refuses, the sequence going on (continue_on_error), a rework
    step its condition picks, a step its condition skips, and a par block run again."""
    tries: dict[str, int] = {}

    def jam_once(command: EquipmentCommand) -> Any:
        tries[command.type] = tries.get(command.type, 0) + 1
        if tries[command.type] == 1:
            raise EquipmentFailure("jammed")
        return {"ok": True}

    station.equipment.behaviours = {
        "com.example.measure.v1": lambda command: {"torque": 70},
        "com.example.lift_a.v1": jam_once,
    }
    recipe = {
        "steps": [
            step("measure", continue_on_error=True, assertion="torque >= 80"),
            step("rework", condition="measure.torque < 80"),
            step("skip_me", condition="measure.torque >= 80"),
            {"name": "lift", "max_attempts": 2, "par": [step("lift_a"), step("lift_b")]},
        ]
    }
    async with running(station.gateway()), station.mes() as mes:
        await start(mes, recipe)
        response = await final_response(mes)
    assert state_of(response)[:2] == ["Ended", "Completed"]
    data = data_of(response)
    assert data["measure"] == {"torque": 70}
    assert "skip_me" not in data
    commands = sent(station.equipment)
    assert commands[:2] == ["J1:measure:1", "J1:rework:1"]  # measure once; skip_me never
    # The par block twice: lift_a jammed in its first run, both sent again.
    assert sorted(commands[2:]) == ["J1:lift_a:1", "J1:lift_a:2", "J1:lift_b:1", "J1:lift_b:2"]
