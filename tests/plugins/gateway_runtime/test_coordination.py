"""The SFC engine end to end: MES over real MQTT, job management and the engine on real Redis,
equipment through the driver API (in-process test equipment)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentReply
from gateway.formats import Execution, Status
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState
from gateway.recipes import JobCommand
from gateway.store import KeySchema
from gateway.testing import poll_until, running, wait_until
from gateway.testing.equipment import EquipmentFailure, NoAnswer, TestEquipment, silent_first
from gateway.testing.mqtt import connect_test_client
from gateway.testing.redis_ha import grown_since, lasting_keys, redis_client
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    complete_and_clear,
    final_response,
    job_order,
    return_status,
    work_master,
)
from gateway_jobs.testing import response_data as data_of
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_runtime.events import EventRouter
from gateway_runtime.executions import Commit
from gateway_runtime.keys import RuntimeKeys
from gateway_runtime.progress import read_progress
from gateway_runtime.reconcile import lost_command, report_lost
from gateway_runtime.settings import RuntimeSettings
from gateway_runtime.state import dump_execution, load_execution
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe

OK = ReturnStatus.NO_ERROR

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

EXAMPLES = Path(__file__).parents[3] / "examples" / "recipes"
QA_RESULT = "com.example.station.qa_result.v1"
TORQUE_RESULT = "com.example.station.torque_result.v1"


@dataclass
class SfcStation:
    mqtt_url: str
    redis_url: str
    name: str
    equipment: TestEquipment = field(default_factory=TestEquipment)
    observers: dict[str, object] = field(default_factory=dict)

    def gateway(self, instance: str = "a", **settings: str) -> Gateway:
        """An instance; ``settings``: more ``GATEWAY_...`` variables."""
        environ = {
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-{instance}",
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_JOBS_TOPIC_PREFIX": self.name,
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
            "GATEWAY_RUNTIME_CLAIM_IDLE_SECONDS": "1",
            **settings,
        }
        plugins = {"equipment": self.equipment, **self.observers}
        return Gateway.from_environment(None, environ, extra_plugins=plugins)

    @asynccontextmanager
    async def mes(self, scope: str = "cell1") -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, scope)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> SfcStation:
    return SfcStation(mqtt_url, redis_url, unique)


def recipe(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


async def run_job(
    mes: JobsMes, recipe_data: Any, job: str = "J1", parameters: dict[str, Any] | None = None
) -> None:
    wm = work_master(f"WM-{job}", recipe_data, dataschema=DATASCHEMA)
    configured = await mes.configure("workmaster", wm)
    assert return_status(configured) == OK, configured.data
    order = job_order(job, work_masters=[f"WM-{job}"])
    if parameters:
        order["JobOrderParameters"] = [{"ID": k, "Value": v} for k, v in parameters.items()]
    assert return_status(await mes.store(order, method="StoreAndStart")) == OK


async def engine_settled(station: SfcStation, scope: str, *, held: int = 0) -> None:
    """Wait until the engine has read and acknowledged every entry of the scope's work stream
    (all delivered, none pending but at most the ``held`` ones a test keeps in hand), and
    reported every end it committed (reported where committed, not through the stream):
    whatever it was going to do about them is done."""
    keys = RuntimeKeys(KeySchema(station.name))
    async with redis_client(station.redis_url) as redis:
        stream = keys.work(scope)

        async def settled() -> bool:
            last = (await redis.xinfo_stream(stream))["last-generated-id"]
            groups = await redis.xinfo_groups(stream)
            return all(g["pending"] <= held and g["last-delivered-id"] == last for g in groups)

        async def reported() -> bool:
            for job in await redis.smembers(keys.active(scope)):
                text = await redis.get(keys.execution(scope, str(job)))
                if text is not None and load_execution(text).status is Status.FINISHING:
                    return False
            return True

        await poll_until(settled)
        await poll_until(reported)


def tightener(equipment: TestEquipment, torque: float = 85.2) -> dict[str, Any]:
    """Tightening controller: answers the command, then reports the torque result."""

    async def tighten(command: EquipmentCommand) -> Any:
        result = {"torque": torque, "torque_ok": True}
        await equipment.emit(TORQUE_RESULT, result, equipment="tightener", scope=command.scope)
        return {"torque": torque, "unit": "Nm"}

    return {"com.example.station.tighten.v1": tighten}


def rear_axle_station(equipment: TestEquipment) -> dict[str, Any]:
    """The ``tightener``, and a camera that reports its QA result (naming no job) once the axle
    is positioned: its job holds the camera by then, so the event is that job's."""

    async def position(command: EquipmentCommand) -> Any:
        qa = {"passed": True, "defects": 0}
        await equipment.emit(QA_RESULT, qa, equipment="camera", scope=command.scope)
        return {"ok": True}

    return {**tightener(equipment), "com.example.station.position.v1": position}


async def test_the_rear_axle_recipe_runs_to_completed_with_torque_and_qa_results(
    station: SfcStation,
) -> None:
    station.equipment.behaviours = rear_axle_station(station.equipment)
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, recipe("rear_axle.json"))
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    data = data_of(response)
    assert data["tighten"] == {"torque": 85.2, "unit": "Nm"}
    assert data["camera_qa"] == {"passed": True, "defects": 0}
    assert data["verify"] == {"torque": 85.2, "torque_ok": True}
    sent = [command.correlation_id for command in station.equipment.received]
    assert sent == ["J1:position_axle:1", "J1:tighten:1"]


async def test_a_loop_ends_on_its_counter_condition(station: SfcStation) -> None:
    count = 0

    def tighten(command: EquipmentCommand) -> Any:
        nonlocal count
        count += 1
        return {"count": count, "torque_ok": True}  # the recipe reads both

    loop = recipe("loop_until_count.json")
    station.equipment.behaviours = {action["type_id"]: tighten for action in loop["actions"]}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, loop, parameters={"bolts": 4})
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    correlations = [command.correlation_id for command in station.equipment.received]
    assert len(correlations) == len(set(correlations))  # every pass its own correlation id


SIMPLE_ACTION = {
    "name": "tighten",
    "step": "Tighten",
    "interaction": "push_command",
    "type_id": "com.example.tighten.v1",
    "timeout_seconds": 0.3,
    "retry": {"max_attempts": 2, "backoff_seconds": 0.05},
}
SIMPLE = {
    "steps": [{"name": "Tighten", "initial": True}, {"name": "Done"}],
    "transitions": [{"source": "Tighten", "target": "Done"}],
    "actions": [SIMPLE_ACTION],
}


async def test_timeout_retry_success_with_a_durable_timer(station: SfcStation) -> None:
    station.equipment.behaviours = {"com.example.tighten.v1": silent_first({"torque": 80})}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, SIMPLE)
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    # The restart's recovery scan may re-send try 1 (same correlation id); the timer made try 2.
    sent = [c.correlation_id for c in station.equipment.received]
    assert sorted(set(sent)) == ["J1:tighten:1", "J1:tighten:2"]
    assert sent[-1] == "J1:tighten:2"


async def test_an_equipment_error_aborts_with_the_error_and_side_effects(
    station: SfcStation,
) -> None:
    def broken(command: EquipmentCommand) -> Any:
        raise EquipmentFailure("spindle jammed")

    station.equipment.behaviours = {"com.example.tighten.v1": broken}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, SIMPLE)
        response = await final_response(mes, "J1")
    assert state_of(response)[0] == "Aborted"
    data = data_of(response)
    assert "spindle jammed" in data["Error"]
    assert data["SideEffects"] is True


async def test_hold_then_mes_resume_retries_the_failed_action(station: SfcStation) -> None:
    tries = 0

    def fails_first(command: EquipmentCommand) -> Any:
        nonlocal tries
        tries += 1
        if tries <= 2:
            raise EquipmentFailure("torque out of range", {"torque": 97.4, "unit": "Nm"})
        return {"torque": 85}

    station.equipment.behaviours = {"com.example.tighten.v1": fails_first}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, {**SIMPLE, "on_error": "hold"})

        async def held() -> bool:
            response = (await mes.job_response("J1")).data["JobResponse"]
            return state_of(response)[:2] == ["Interrupted", "Held"] and bool(data_of(response))

        await poll_until(held, timeout=5)
        # The error reply's reading is in the Job Response, beside the hold's reason.
        response = (await mes.job_response("J1")).data["JobResponse"]
        assert data_of(response)["tighten"] == {"torque": 97.4, "unit": "Nm"}
        assert "torque out of range" in response["Description"]["Text"]
        assert return_status(await mes.act("Resume", "J1")) == OK
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert tries == 3


async def test_mes_pause_resume_and_stop_act_on_the_running_chart(station: SfcStation) -> None:
    release = anyio.Event()

    async def slow(command: EquipmentCommand) -> Any:
        await release.wait()
        return {"ok": True}

    two_steps = {
        "steps": [{"name": "A", "initial": True}, {"name": "B"}, {"name": "Done"}],
        "transitions": [{"source": "A", "target": "B"}, {"source": "B", "target": "Done"}],
        "actions": [
            {
                "name": "a",
                "step": "A",
                "interaction": "push_command",
                "type_id": "com.example.a.v1",
            },
            {
                "name": "b",
                "step": "B",
                "interaction": "push_command",
                "type_id": "com.example.b.v1",
            },
        ],
    }
    station.equipment.behaviours = {"com.example.a.v1": slow}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, two_steps)
        await wait_until(lambda: station.equipment.sent("com.example.a.v1"))
        assert return_status(await mes.act("Pause", "J1")) == OK
        # The Pause reaches the chart through the work stream, A's reply does not: the engine
        # takes the Pause before A answers (on a Cluster its reads poll, so a reply could
        # otherwise overtake it, as it could on a loaded machine).
        await engine_settled(station, "cell1")
        release.set()
        await wait_until(lambda: station.equipment.answered)  # A's reply is recorded...
        await engine_settled(station, "cell1")  # ...and the engine has worked through it
        assert station.equipment.sent("com.example.b.v1") == []  # paused: B not started
        assert return_status(await mes.act("Resume", "J1")) == OK
        await wait_until(lambda: station.equipment.sent("com.example.b.v1"))
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]


async def test_mes_abort_mid_chart_stops_dispatching(station: SfcStation) -> None:
    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment.behaviours = {"com.example.tighten.v1": silent}
    slow = {**SIMPLE, "actions": [{**SIMPLE_ACTION, "timeout_seconds": 30}]}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, slow)
        await wait_until(lambda: station.equipment.received)
        assert return_status(await mes.act("Abort", "J1")) == OK
        response = await final_response(mes, "J1")
        await engine_settled(station, "cell1")  # whatever the abort left to do is done
    assert state_of(response)[0] == "Aborted"
    assert len(station.equipment.received) == 1


@pytest.mark.parametrize(
    ("method", "status"),
    [("Abort", Status.ENDED), ("Stop", Status.ENDED), ("Pause", Status.PAUSED)],
)
async def test_an_mes_command_that_comes_while_the_chart_is_created_is_applied_at_once(
    station: SfcStation, method: str, status: Status
) -> None:
    """The job is Running and its chart being created when the MES aborts, stops or pauses
    it: the command's entry finds no chart yet. It is applied as soon as the chart exists,
    not at the next reconciliation (an hour away here). The start, slow, is handled again
    meanwhile (as another instance's reconciliation would, taking the first one for lost):
    that second start of a job paused since creates the chart too (the first one may be
    gone), one of stopped or aborted job does not."""

    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment.behaviours = {"com.example.tighten.v1": silent}
    gateway = station.gateway(GATEWAY_RUNTIME_RECONCILE_SECONDS="3600")
    coordinator = gateway.state.find(Coordinator)
    assert coordinator is not None
    create, release = coordinator.executions.create, anyio.Event()
    creating: list[str] = []

    async def held_create(*args: Any, **kwargs: Any) -> Commit:
        creating.append("J1")
        await release.wait()
        return await create(*args, **kwargs)

    coordinator.executions.create = held_create  # type: ignore[method-assign]
    async with running(gateway), station.mes() as mes, anyio.create_task_group() as again:
        await run_job(mes, SIMPLE)

        async def running_job() -> bool:
            return state_of(await response_of(mes, "J1"))[:1] == ["Running"]

        await poll_until(running_job)
        await poll_until(lambda: _at_least(creating, 1))
        assert return_status(await mes.act(method, "J1")) == OK
        await engine_settled(station, "cell1")  # all done but the start held
        again.start_soon(coordinator.steps.start, "cell1", "J1")
        if method == "Pause":
            await poll_until(lambda: _at_least(creating, 2))  # the second start's too
        release.set()

        async def applied() -> bool:
            execution = await coordinator.executions.read("cell1", "J1")
            return execution is not None and execution.status is status

        await poll_until(applied)
        await engine_settled(station, "cell1")
        execution = await coordinator.executions.read("cell1", "J1")
    assert execution is not None
    assert execution.status is status


async def _at_least(items: list[str], count: int) -> bool:
    return len(items) >= count


async def response_of(mes: JobsMes, job: str) -> dict[str, Any]:
    return dict((await mes.job_response(job)).data.get("JobResponse") or {})


@pytest.mark.parametrize(
    ("state", "status", "command"),
    [
        (JobState.RUNNING, Status.RUNNING, None),
        (JobState.RUNNING, Status.PAUSED, JobCommand.RESUME),
        (JobState.RUNNING, Status.HELD, None),  # the hold may not be reported yet
        (JobState.SUSPENDED, Status.RUNNING, JobCommand.PAUSE),
        (JobState.SUSPENDED, Status.PAUSED, None),
        (JobState.HELD, Status.HELD, None),
        (JobState.CLOSED, Status.RUNNING, JobCommand.STOP),
        (JobState.COMPLETED, Status.FINISHING, None),  # the chart's own end
        (JobState.ABORTED, Status.PAUSED, JobCommand.ABORT),
        (JobState.ABORTED, Status.FINISHING, None),
        (JobState.END, Status.RUNNING, JobCommand.ABORT),
        (None, Status.RUNNING, JobCommand.ABORT),
    ],
)
def test_the_command_a_chart_missed_follows_from_its_jobs_state(
    state: JobState | None, status: Status, command: JobCommand | None
) -> None:
    assert lost_command(state, status) is command


@pytest.mark.parametrize(
    ("state", "status", "lost"),
    [
        (JobState.SUSPENDED, Status.FINISHING, False),  # waits for the MES's Resume
        (JobState.RUNNING, Status.FINISHING, True),  # resumed: the Resume may be lost
        (JobState.CLOSED, Status.FINISHING, True),  # stopped meanwhile: results to record
        (JobState.COMPLETED, Status.FINISHING, True),  # completed, not closed yet
        (None, Status.FINISHING, False),  # gone: nothing to report to
        (JobState.RUNNING, Status.RUNNING, False),
        (JobState.RUNNING, Status.ENDED, False),
    ],
)
def test_a_finishing_chart_reports_again_unless_the_mes_keeps_its_job_interrupted(
    state: JobState | None, status: Status, lost: bool
) -> None:
    assert report_lost(state, status) is lost


async def test_a_job_whose_hand_off_was_lost_is_started_by_reconciliation(
    station: SfcStation,
) -> None:
    """A crash between storing StoreAndStart and the start entry: the job still runs."""
    without_engine = station.gateway("a")
    without_engine.role = "none"  # bindings and processors, but no engine service
    async with running(without_engine), station.mes() as mes:
        await run_job(mes, SIMPLE)
        store = without_engine.store
        assert store is not None
        stream = store.keys.scoped("cell1", "rt", "work")
        assert await store.client.xlen(stream) == 1  # the start entry...
        await store.client.xtrim(stream, maxlen=0)  # ...lost with the instance that wrote it
    # The instance comes back (same id, so the broker's session and its commands are its own).
    async with running(station.gateway("a")), station.mes() as mes:
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]


async def test_a_timeout_set_before_a_restart_fires_after_it(station: SfcStation) -> None:
    """Timers live in Redis: a timeout due while no instance runs fires when one comes back."""

    def silent_first(command: EquipmentCommand) -> Any:
        if command.correlation_id.endswith(":1"):  # the first try (also when re-sent)
            raise NoAnswer
        return {"torque": 81}

    station.equipment.behaviours = {"com.example.tighten.v1": silent_first}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, {**SIMPLE, "actions": [{**SIMPLE_ACTION, "timeout_seconds": 0.5}]})
        await wait_until(lambda: station.equipment.received)
    await anyio.sleep(0.8)  # the timeout falls due while nothing runs
    async with running(station.gateway()), station.mes() as mes:
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    # The restart's recovery scan may re-send try 1 (same correlation id); the timer made try 2.
    sent = [c.correlation_id for c in station.equipment.received]
    assert sorted(set(sent)) == ["J1:tighten:1", "J1:tighten:2"]
    assert sent[-1] == "J1:tighten:2"


@dataclass
class StepLog:
    changes: list[tuple[str, bool]] = field(default_factory=list)

    @hookimpl
    def gateway_step_changed(self, scope: str, job_order_id: str, step: str, active: bool) -> None:
        self.changes.append((step, active))


async def test_observers_see_every_step_become_active_and_inactive(station: SfcStation) -> None:
    steps = StepLog()
    station.observers["steps"] = steps
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, SIMPLE)
        await final_response(mes, "J1")
    # Done has no actions: entered and left within one state change, it is not reported.
    assert steps.changes == [("Tighten", True), ("Tighten", False)]


@dataclass
class TrackedEquipment(TestEquipment):
    """Test equipment that is supposed to send heartbeats (and here never does)."""

    def expects_heartbeats(self, equipment_id: str) -> bool:
        return True


async def test_an_action_on_offline_equipment_fails_with_equipment_offline(
    station: SfcStation,
) -> None:
    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment = TrackedEquipment(behaviours={"com.example.tighten.v1": silent})
    action = {**SIMPLE_ACTION, "equipment": "tightener", "retry": {"max_attempts": 1}}
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, {**SIMPLE, "actions": [action]})
        response = await final_response(mes, "J1")
    assert state_of(response)[0] == "Aborted"
    error = data_of(response)["Error"]
    assert "equipment tightener offline: never seen" in error
    assert "no reply within 0.3 s" in error


@dataclass
class ActiveSteps:
    entered: set[tuple[str, str, str]] = field(default_factory=set)

    @hookimpl
    def gateway_step_changed(self, scope: str, job_order_id: str, step: str, active: bool) -> None:
        if active:
            self.entered.add((scope, job_order_id, step))


def waits_for(type_id: str) -> dict[str, Any]:
    action = {"name": "wait", "step": "Wait", "interaction": "pull_event", "type_id": type_id}
    return {
        "steps": [{"name": "Wait", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Wait", "target": "Done"}],
        "actions": [action],
    }


async def test_an_event_of_no_scope_goes_to_the_scope_where_a_job_waits_for_its_type(
    station: SfcStation,
) -> None:
    steps = ActiveSteps()
    station.observers["steps"] = steps
    async with (
        running(station.gateway()),
        station.mes("cell0") as other_mes,
        station.mes("cell1") as mes,
    ):
        await run_job(other_mes, waits_for("com.example.other.v1"), job="J0")
        await run_job(mes, waits_for(QA_RESULT), job="J1")
        await wait_until(
            lambda: {("cell0", "J0", "Wait"), ("cell1", "J1", "Wait")} <= steps.entered
        )
        # cell0 comes first by name and has a waiting job, but not one waiting for this type.
        await station.equipment.emit(QA_RESULT, {"passed": True})
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["wait"] == {"passed": True}


async def test_a_kept_event_whose_taking_failed_is_taken_later(
    station: SfcStation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The event comes before its job waits for it, so it is kept; the job's first try to take
    # it fails (the store went away: a failover). The event must still be there for the next
    # look (reconciliation's), not gone with a half-done claim.
    offer = EventRouter.offer
    failed: list[str] = []

    async def offer_failing_once(
        self: EventRouter, scope: str, job: str, *args: Any, **kwargs: Any
    ) -> bool:
        if not failed:
            failed.append(job)
            raise ConnectionError("the store went away (test)")
        return await offer(self, scope, job, *args, **kwargs)

    monkeypatch.setattr(EventRouter, "offer", offer_failing_once)
    gateway = station.gateway(GATEWAY_RUNTIME_RECONCILE_SECONDS="0.2")
    async with running(gateway), station.mes("cell1") as mes, redis_client(station.redis_url) as r:
        await station.equipment.emit(QA_RESULT, {"passed": True}, scope="cell1")
        kept = f"{station.name}:{{cell1}}:rt:unclaimed"
        await poll_until(lambda: r.llen(kept))
        await run_job(mes, waits_for(QA_RESULT), job="J1")
        response = await final_response(mes, "J1")
        assert await r.llen(kept) == 0
    assert failed == ["J1"]
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["wait"] == {"passed": True}


async def test_a_job_that_cannot_take_events_does_not_keep_them_from_the_others(
    station: SfcStation,
) -> None:
    steps = ActiveSteps()
    station.observers["steps"] = steps
    async with (
        running(station.gateway()),
        station.mes("cell1") as mes,
        redis_client(station.redis_url) as redis,
    ):
        await run_job(mes, waits_for(QA_RESULT), job="J1")
        await wait_until(lambda: ("cell1", "J1", "Wait") in steps.entered)
        # J0 has waited longest, and its state has no recipe beside it (what a partial loss of
        # Redis's data could leave): asking it about an event fails for good.
        keys = f"{station.name}:{{cell1}}:rt"
        await redis.set(f"{keys}:exec:J0", dump_execution(Execution(scope="cell1", job="J0")))
        await redis.zadd(f"{keys}:waiting", {"J0": 0})
        await station.equipment.emit(QA_RESULT, {"passed": True}, scope="cell1")
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["wait"] == {"passed": True}


async def test_an_engine_only_process_shares_the_steps_of_a_gateway_process(
    station: SfcStation,
) -> None:
    """Role ``engine`` runs the engine without job management; replies are applied in both."""
    gateway = station.gateway("a")
    engine = Gateway.from_environment(
        None,
        {
            "GATEWAY_MQTT_URL": station.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": station.name,
            "GATEWAY_REDIS_URL": station.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": station.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{station.name}-engine",
            "GATEWAY_GATEWAY_ROLE": "engine",
            "GATEWAY_JOBS_TOPIC_PREFIX": station.name,
        },
        extra_plugins={"equipment": station.equipment},
    )
    loop = recipe("loop_until_count.json")
    station.equipment.behaviours = {
        action["type_id"]: lambda c: {"count": 9, "torque_ok": True} for action in loop["actions"]
    }
    async with running(gateway), running(engine), station.mes() as mes:
        for job in ("J1", "J2", "J3"):
            await run_job(mes, loop, job=job, parameters={"bolts": 1})
        responses = [await final_response(mes, job) for job in ("J1", "J2", "J3")]
    assert [state_of(response)[:2] for response in responses] == [["Ended", "Completed"]] * 3
    # Replies went through both processes' hubs (the test equipment alternates between them).
    assert len(station.equipment.gateways) == 2


async def test_a_jobs_process_answers_the_mes_and_an_engine_process_runs_the_charts(
    station: SfcStation,
) -> None:
    """Role ``jobs`` runs job management alone (the MES's calls get a process of their own);
    role ``engine`` runs the recipes and talks to the equipment."""
    jobs = station.gateway("jobs", GATEWAY_GATEWAY_ROLE="jobs")
    engine = station.gateway("engine", GATEWAY_GATEWAY_ROLE="engine")
    async with running(jobs), running(engine), station.mes() as mes:
        assert {p.name for p in jobs.processors if jobs.runs(p.roles)} == {"jobs"}
        assert "jobs" not in {p.name for p in engine.processors if engine.runs(p.roles)}
        assert "recipe-runtime" not in {service.name for service in jobs.services_for_role()}
        for job in ("J1", "J2"):
            await run_job(mes, SIMPLE, job=job)
        responses = [await final_response(mes, job) for job in ("J1", "J2")]
    assert [state_of(response)[:2] for response in responses] == [["Ended", "Completed"]] * 2


def fan_out_recipe(levels: int) -> dict[str, Any]:
    """The runaway recipe: ``c_i = "c_{i+1} and c_{i+1}"``, 2**(levels+2)-1 terms written out."""
    conditions = {f"c_{i}": f"c_{i + 1} and c_{i + 1}" for i in range(levels)}
    conditions[f"c_{levels}"] = "tighten.torque > 0"
    transitions = [{"source": "Tighten", "target": "Done", "condition": "c_0"}]
    return {**SIMPLE, "transitions": transitions, "conditions": conditions}


async def test_a_runaway_condition_is_refused_and_a_large_one_runs_without_stalling(
    station: SfcStation,
) -> None:
    station.equipment.behaviours = {"com.example.tighten.v1": lambda command: {"torque": 80}}
    async with running(station.gateway()), station.mes() as mes:
        refused = await mes.configure(
            "workmaster", work_master("WM-runaway", fan_out_recipe(31), dataschema=DATASCHEMA)
        )
        assert return_status(refused) != OK
        assert "named condition 'c_19'" in (refused.errormessage or ""), refused.errormessage
        assert "more than the limit of 10000" in (refused.errormessage or "")
        # Just within the bound (8,191 terms written out): memoised, it costs 12 evaluations.
        with anyio.fail_after(10):
            await run_job(mes, fan_out_recipe(11))
            response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]


async def test_a_condition_reading_a_field_the_equipment_did_not_send_aborts_naming_it(
    station: SfcStation,
) -> None:
    station.equipment.behaviours = {"com.example.tighten.v1": lambda command: {"printed": True}}
    transitions = [{"source": "Tighten", "target": "Done", "condition": "tighten.printd"}]
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, {**SIMPLE, "transitions": transitions})
        response = await final_response(mes, "J1")
    assert state_of(response)[0] == "Aborted"
    assert data_of(response)["Error"] == (
        "transition from Tighten to Done: condition 'tighten.printd': the result of action "
        "'tighten' has no field 'printd' (it has: printed)"
    )


async def test_a_job_run_and_cleared_leaves_nothing_that_lasts(station: SfcStation) -> None:
    """A station runs for years: what a job writes expires or goes with it (the recipe
    snapshot, the job's scope for replies that do not say it), or the store grows per job."""

    async def run_and_clear(mes: JobsMes, job: str) -> None:
        await complete_and_clear(mes, job, "WM")
        await engine_settled(station, "cell1")

    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        wm = work_master("WM", linear_recipe(3), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        await run_and_clear(mes, "J0")  # the station's own keys exist from here on
        before = await lasting_keys(station.redis_url, station.name)
        for job in ("J1", "J2", "J3"):
            await run_and_clear(mes, job)

        assert await grown_since(station.redis_url, station.name, before) == {}
        # A late reply that does not say its scope finds its job as long as its ended state
        # is kept.
        assert await gateway.state.get(Coordinator).scopes.job_scope("J3") == "cell1"
        async with redis_client(station.redis_url) as redis:
            key = RuntimeKeys(KeySchema(station.name)).execution("cell1", "J3")
            assert 0 < await redis.ttl(key) <= RuntimeSettings().ended_ttl_seconds


async def test_the_state_holds_what_goes_on_and_the_actions_done_go_to_the_history(
    station: SfcStation,
) -> None:
    """The state is written on every step: with the actions done kept in it, a 200-step
    recipe wrote 50 KB per step at its end. They go to the history, which the view reads."""
    steps = 30
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        await run_job(mes, linear_recipe(steps))
        assert state_of(await final_response(mes))[:2] == ["Ended", "Completed"]
        await engine_settled(station, "cell1")
        assert gateway.store is not None
        progress = await read_progress(gateway.state.get(Coordinator), "cell1", "J1")
        keys = RuntimeKeys(KeySchema(station.name))
        async with redis_client(station.redis_url) as redis:
            state = await redis.get(keys.execution("cell1", "J1"))
            history = await redis.hgetall(keys.history("cell1", "J1"))
            history_ttl = await redis.ttl(keys.history("cell1", "J1"))
    assert state is not None
    assert load_execution(state).actions == {}
    assert sorted(history) == sorted(f"a{index}" for index in range(steps))
    assert 0 < history_ttl <= RuntimeSettings().ended_ttl_seconds
    assert progress is not None
    assert [(action.name, action.phase) for action in progress.actions] == [
        (f"a{index}", "done") for index in range(steps)
    ]
    assert progress.results == {f"a{index}": {"ok": True} for index in range(steps)}


async def test_a_job_id_cleared_and_stored_again_runs_its_new_recipe(station: SfcStation) -> None:
    """The first run's recipe snapshot stays (expiring) after its Clear: a new job of the same
    id runs the recipe it was stored with, not the one its predecessor ran."""
    async with running(station.gateway()), station.mes() as mes:
        for name, type_id in (("WM-old", "old"), ("WM-new", "new")):
            wm = work_master(name, linear_recipe(1, type_id=type_id), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == OK
        await complete_and_clear(mes, "J1", "WM-old")
        await complete_and_clear(mes, "J1", "WM-new")
    sent = [(command.type, command.correlation_id) for command in station.equipment.received]
    assert sent == [("old", "J1:a0:1"), ("new", "J1:a0:2")]  # tries numbered on


async def test_a_late_reply_to_an_earlier_run_of_the_job_id_is_not_taken_by_the_new_run(
    station: SfcStation,
) -> None:
    """The runs of a job id number their tries on, so a reply to the earlier run that comes
    late (the same job, action and try) does not answer the new run's command."""

    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment.behaviours = {"silent": silent}
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        for name, type_id in (("WM-old", "old"), ("WM-new", "silent")):
            wm = work_master(name, linear_recipe(1, type_id=type_id), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == OK
        await complete_and_clear(mes, "J1", "WM-old")
        order = job_order("J1", work_masters=["WM-new"])
        assert return_status(await mes.store(order, method="StoreAndStart")) == OK
        await wait_until(lambda: len(station.equipment.received) == 2)

        await gateway.equipment.reply(EquipmentReply("J1:a0:1", {"late": True}, scope="cell1"))
        assert await gateway.job_control.state("cell1", "J1") is JobState.RUNNING
        await gateway.equipment.reply(EquipmentReply("J1:a0:2", {"torque": 9}, scope="cell1"))
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]
    assert data_of(response)["a0"] == {"torque": 9}


async def test_a_snapshot_kept_from_an_earlier_run_of_the_job_id_is_not_used(
    station: SfcStation,
) -> None:
    """An instance may keep in memory the snapshot of a job id's earlier run (the new run was
    started on another instance): the stored snapshot of the run the state names is used."""
    station.equipment.behaviours = {"new": silent_first({"ok": True})}
    new_recipe = {**SIMPLE, "actions": [{**SIMPLE_ACTION, "type_id": "new"}]}
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes:
        for name, recipe_data in (
            ("WM-old", {**SIMPLE, "actions": [{**SIMPLE_ACTION, "type_id": "old"}]}),
            ("WM-new", new_recipe),
        ):
            wm = work_master(name, recipe_data, dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == OK
        await complete_and_clear(mes, "J1", "WM-old")
        coordinator = gateway.state.find(Coordinator)
        assert coordinator is not None
        earlier = await coordinator.recipes.get("cell1", "J1")  # the ended run's, still stored

        order = job_order("J1", work_masters=["WM-new"])
        assert return_status(await mes.store(order, method="StoreAndStart")) == OK
        await wait_until(lambda: len(station.equipment.received) == 2)  # the new run's try 1
        coordinator.recipes.keep("cell1", "J1", earlier)  # as another instance would keep it
        assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
    sent = [(command.type, command.correlation_id) for command in station.equipment.received]
    assert sent == [("old", "J1:tighten:1"), ("new", "J1:tighten:2"), ("new", "J1:tighten:3")]


async def test_a_job_id_aborted_cleared_and_stored_at_once_runs_again(station: SfcStation) -> None:
    """Abort, Clear and StoreAndStart of the same id back to back: the new run starts even if
    the earlier chart is still taking the Abort in when its start comes."""
    station.equipment.behaviours = {"first": silent_first({"ok": True})}
    async with running(station.gateway()), station.mes() as mes:
        wm = work_master("WM", linear_recipe(1, type_id="first"), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        order = job_order("J1", work_masters=["WM"])
        assert return_status(await mes.store(order, method="StoreAndStart")) == OK
        await wait_until(lambda: len(station.equipment.received) == 1)
        assert return_status(await mes.act("Abort", "J1")) == OK
        assert return_status(await mes.act("Clear", "J1")) == OK
        assert return_status(await mes.store(order, method="StoreAndStart")) == OK
        response = await final_response(mes, "J1")
    assert state_of(response)[:2] == ["Ended", "Completed"]


async def test_a_start_waits_for_the_earlier_run_of_its_job_id_to_end(
    station: SfcStation, caplog: pytest.LogCaptureFixture
) -> None:
    """A start that finds the job id's earlier run not ended yet is tried again, and the job
    runs once that run has ended (here the earlier run's state is written by the test)."""
    keys = RuntimeKeys(KeySchema(station.name))
    earlier = Execution(scope="cell1", job="J2", version=3, run="earlier")
    with caplog.at_level(logging.INFO):
        async with (
            running(station.gateway()),
            station.mes() as mes,
            redis_client(station.redis_url) as redis,
        ):
            wm = work_master("WM", linear_recipe(1), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == OK
            await redis.set(keys.execution("cell1", "J2"), dump_execution(earlier))
            order = job_order("J2", work_masters=["WM"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == OK
            await wait_until(lambda: "its earlier run has not ended yet" in caplog.text)
            assert station.equipment.received == []  # held back by the earlier run
            earlier.status = Status.ENDED
            await redis.set(keys.execution("cell1", "J2"), dump_execution(earlier))
            response = await final_response(mes, "J2")
    assert state_of(response)[:2] == ["Ended", "Completed"]


async def test_an_mes_command_for_an_earlier_run_of_the_job_id_is_ignored(
    station: SfcStation,
) -> None:
    """MES commands reach the chart through the work stream: one for the job id's earlier run
    that comes after the new run started does not act on the new run."""

    def silent(command: EquipmentCommand) -> Any:
        raise NoAnswer

    station.equipment.behaviours = {"silent": silent}
    keys = RuntimeKeys(KeySchema(station.name))
    gateway = station.gateway()
    async with running(gateway), station.mes() as mes, redis_client(station.redis_url) as redis:
        wm = work_master("WM", linear_recipe(1, type_id="silent"), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == OK
        order = job_order("J1", work_masters=["WM"])
        assert return_status(await mes.store(order, method="StoreAndStart")) == OK
        await wait_until(lambda: station.equipment.received)
        stale: dict[Any, Any] = {"kind": "command", "job": "J1", "command": JobCommand.ABORT}
        await redis.xadd(keys.work("cell1"), {**stale, "run": "an-earlier-run"})
        await engine_settled(station, "cell1")
        state = load_execution(await redis.get(keys.execution("cell1", "J1")) or "")
        assert state.status is Status.RUNNING
        assert await gateway.job_control.state("cell1", "J1") is JobState.RUNNING
