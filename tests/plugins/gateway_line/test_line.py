"""A line of stations over real mosquitto and Redis: two gateways in one test, one broker.

The upstream gateway (the line) runs a sequence whose steps name stations (``[line] stations``);
the downstream gateway runs each as a job of its own (its own key and topic prefixes, its
equipment ``TestEquipment`` answering as each test says), and the line follows it as the
station's MES does: status events, the retained state index and results.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState
from gateway.testing import running, wait_until
from gateway.testing.equipment import EquipmentFailure, TestEquipment, station_with
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    connect_mes,
    final_response,
    job_order,
    response_data,
    return_status,
    state_texts,
    work_master,
)
from gateway_line import downstream_job_id, upstream_of
from gateway_sequence import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR
LINE_JOB = "io.github.station-gateway.line.job.v1"
WORK = "com.example.work.v1"
STATION_RECIPE = {"steps": [{"name": "work", "type_id": WORK, "timeout_seconds": 10}]}
LINE_RECIPE = {
    "timeout_seconds": 10,
    "steps": [
        {
            "name": "press_it",
            "type_id": LINE_JOB,
            "equipment": "press",
            "parameters": {"WorkMasterID": "WM-STATION", "force_kn": 12},
        },
        {
            "name": "paint_it",
            "type_id": LINE_JOB,
            "equipment": "paint",
            "parameters": {"WorkMasterID": "WM-STATION", "colour": "red"},
        },
    ],
}


@dataclass
class StationLog:
    """What the downstream gateway did: methods answered and state changes (an observer)."""

    methods: list[tuple[str, str, str]] = field(default_factory=list)  # job, method, status
    states: list[tuple[str, str, JobState]] = field(default_factory=list)  # job, method, state

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
        self.methods.append((job_order_id, method, status))

    @hookimpl
    def gateway_job_state_changed(
        self, scope: str, job_order_id: str, method: str, previous: JobState, current: JobState
    ) -> None:
        self.states.append((job_order_id, method, current))

    def stored(self) -> list[str]:
        """The jobs a StoreAndStart stored (a refused duplicate is not one)."""
        return [
            job
            for job, method, status in self.methods
            if (method, status) == ("StoreAndStart", "NO_ERROR")
        ]

    def entered(self, state: JobState) -> list[str]:
        return [job for job, _, current in self.states if current is state]


@dataclass
class Line:
    mqtt_url: str
    redis_url: str
    name: str
    equipment: TestEquipment = field(default_factory=TestEquipment)
    log: StationLog = field(default_factory=StationLog)

    @property
    def stations_prefix(self) -> str:
        return f"{self.name}-stations"

    def stations(self) -> Gateway:
        """The downstream gateway: scopes cell1 (the press) and cell2 (the paint shop)."""
        gateway = station_with(self.equipment, self.mqtt_url, self.redis_url, self.stations_prefix)
        gateway.plugins.register(self.log, name="station-log")
        return gateway

    def line(self, instance: str = "a", **more: str) -> Gateway:
        """An instance of the upstream gateway, the line (scope ``line``); ``more``: further
        ``GATEWAY_...`` variables."""
        environ = {
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-{instance}",
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "2",
            "GATEWAY_JOBS_TOPIC_PREFIX": self.name,
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
            "GATEWAY_LINE_STATIONS": "press=cell1,paint=cell2",
            "GATEWAY_LINE_TOPIC_PREFIX": self.stations_prefix,
            **more,
        }
        return Gateway.from_environment(None, environ)

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[tuple[JobsMes, JobsMes, JobsMes]]:
        """The line's MES (scope ``line``), and the station scopes' (to configure them)."""
        async with (
            connect_mes(self.mqtt_url, self.name, "line") as line,
            connect_mes(self.mqtt_url, self.stations_prefix, "cell1") as press,
            connect_mes(self.mqtt_url, self.stations_prefix, "cell2") as paint,
        ):
            yield line, press, paint


@pytest.fixture
def line(mqtt_url: str, redis_url: str, unique: str) -> Line:
    return Line(mqtt_url, redis_url, unique)


async def configure(line_mes: JobsMes, *stations: JobsMes) -> None:
    for station in stations:
        reply = await station.configure(
            "workmaster", work_master("WM-STATION", STATION_RECIPE, dataschema=DATASCHEMA)
        )
        assert return_status(reply) == OK, reply.data
    reply = await line_mes.configure(
        "workmaster", work_master("WM-LINE", LINE_RECIPE, dataschema=DATASCHEMA)
    )
    assert return_status(reply) == OK, reply.data


async def start_line_job(line_mes: JobsMes, job: str = "J1") -> None:
    order = job_order(
        job, work_masters=["WM-LINE"], JobOrderParameters=[{"ID": "serial", "Value": "SN-7"}]
    )
    stored = await line_mes.store(order, method="StoreAndStart")
    assert return_status(stored) == OK, stored.data


def echo(command: EquipmentCommand) -> Any:
    """The station's equipment: answers with the job's parameters (what the line sent)."""
    return {"scope": command.scope, "job": command.job_order_id, **command.job_parameters}


async def test_a_line_job_runs_a_job_on_each_station_and_gets_their_results(line: Line) -> None:
    line.equipment.behaviours = {WORK: echo}
    async with running(line.stations()), running(line.line()), line.mes() as (mes, press, paint):
        await configure(mes, press, paint)
        await start_line_job(mes)
        response = await final_response(mes)
        await wait_until(lambda: len(line.log.entered(JobState.END)) == 2)  # the line cleared both
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    results = response_data(response)
    pressed, painted = results["press_it"], results["paint_it"]
    assert pressed["work"] == {
        "scope": "cell1",
        "job": pressed["JobOrderID"],
        "serial": "SN-7",  # the line job's parameters, and the action's
        "force_kn": 12,
    }
    assert painted["work"]["colour"] == "red"
    assert painted["work"]["scope"] == "cell2"
    assert pressed["WorkMasterID"] == "WM-STATION"
    assert pressed["JobOrderID"].startswith("J1:press_it:")
    assert pressed["JobOrderID"].endswith("@line")
    assert sorted(line.log.stored()) == sorted([pressed["JobOrderID"], painted["JobOrderID"]])


async def test_an_aborted_station_job_fails_the_line_action_with_the_stations_reason(
    line: Line,
) -> None:
    def jammed(command: EquipmentCommand) -> Any:
        raise EquipmentFailure("press jammed", data={"force_kn": 3})

    line.equipment.behaviours = {WORK: jammed}
    async with running(line.stations()), running(line.line()), line.mes() as (mes, press, paint):
        await configure(mes, press, paint)
        await start_line_job(mes)
        response = await final_response(mes)
    assert state_texts(response) == ["Aborted"]
    results = response_data(response)
    error = results["Error"]
    assert error.startswith("step press_it: ")
    assert " Aborted: step work: " in error  # the station's own error, after its job's id
    assert "press jammed" in error
    assert "paint_it" not in results  # the line stopped at the failed station
    assert [job for job in line.log.stored() if ":paint_it:" in job] == []


def held_work(line: Line) -> anyio.Event:
    """Make the stations' work wait for the returned event (then answer as ``echo``)."""
    release = anyio.Event()

    async def held(command: EquipmentCommand) -> Any:
        await release.wait()
        return echo(command)

    line.equipment.behaviours = {WORK: held}
    return release


async def press_job(line: Line) -> str:
    """The press's job, once its equipment has the command."""
    await wait_until(lambda: line.equipment.received)
    return line.equipment.received[0].job_order_id


async def test_an_abort_of_the_line_job_aborts_the_running_station_job(line: Line) -> None:
    release = held_work(line)
    async with running(line.stations()), running(line.line()), line.mes() as (mes, press, paint):
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        assert return_status(await mes.act("Abort", "J1")) == OK
        await wait_until(lambda: station_job in line.log.entered(JobState.ABORTED))
        release.set()
        response = await final_response(mes)
        await wait_until(lambda: station_job in line.log.entered(JobState.END))  # cleared
    assert state_texts(response) == ["Aborted"]
    assert (station_job, "Abort", JobState.ABORTED) in line.log.states


async def test_pause_and_resume_of_the_line_job_pause_and_resume_the_station_job(
    line: Line,
) -> None:
    release = held_work(line)
    async with running(line.stations()), running(line.line()), line.mes() as (mes, press, paint):
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        assert return_status(await mes.act("Pause", "J1")) == OK
        await wait_until(lambda: station_job in line.log.entered(JobState.SUSPENDED))
        assert return_status(await mes.act("Resume", "J1")) == OK
        await wait_until(lambda: (station_job, "Resume", JobState.RUNNING) in line.log.states)
        release.set()
        response = await final_response(mes)
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)


async def test_a_command_sent_again_follows_the_station_job_instead_of_starting_another(
    line: Line,
) -> None:
    release = held_work(line)
    async with (
        running(line.stations()),
        running(upstream := line.line()),
        line.mes() as (mes, press, paint),
    ):
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        upstream_try = upstream_of(station_job)
        assert upstream_try is not None
        again = EquipmentCommand(
            correlation_id=str(upstream_try.correlation),
            type=LINE_JOB,
            equipment="press",
            scope="line",
            job_order_id="J1",
            action="press_it",
            parameters={"WorkMasterID": "WM-STATION"},
        )
        assert downstream_job_id(again) == station_job
        await upstream.equipment.send(again)  # as the runtime re-sends after a crash
        release.set()
        response = await final_response(mes)
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    press_jobs = [job for job in line.log.stored() if ":press_it:" in job]
    assert press_jobs == [station_job]
    refused = [
        (job, status) for job, method, status in line.log.methods if method == "StoreAndStart"
    ]
    assert (station_job, "UNABLE_TO_ACCEPT_JOB_ORDER") in refused
    assert line.log.entered(JobState.RUNNING).count(station_job) == 1


async def test_a_line_gateway_restarted_mid_job_finishes_it_with_one_station_job(
    line: Line,
) -> None:
    release = held_work(line)
    async with running(line.stations()), line.mes() as (mes, press, paint):
        # Session expiry 0: a's subscriptions end with its connection (it is gone for good).
        async with running(line.line("a", GATEWAY_MQTT_SESSION_EXPIRY_SECONDS="0")):
            await configure(mes, press, paint)
            await start_line_job(mes)
            station_job = await press_job(line)
        # Instance a is gone while the press works; instance b takes over the line job.
        async with running(line.line("b")):
            release.set()
            response = await final_response(mes)
            await wait_until(lambda: station_job in line.log.entered(JobState.END))
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    assert [job for job in line.log.stored() if ":press_it:" in job] == [station_job]
    assert line.log.entered(JobState.RUNNING).count(station_job) == 1
    assert response_data(response)["press_it"]["JobOrderID"] == station_job
    # b's recovery sent the command again: the station refused to store the job twice.
    assert (station_job, "StoreAndStart", "UNABLE_TO_ACCEPT_JOB_ORDER") in line.log.methods
    assert [method for job, method, _ in line.log.methods if job == station_job].count("Clear") == 1
