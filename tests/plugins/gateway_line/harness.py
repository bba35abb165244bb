"""The harness of the line tests: two gateways in one test, one broker, one Redis.

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

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState
from gateway.testing import wait_until
from gateway.testing.equipment import TestEquipment, station_with
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    connect_mes,
    job_order,
    return_status,
    work_master,
)
from gateway_sequence import DATASCHEMA

OK = ReturnStatus.NO_ERROR
LINE_JOB = "io.github.station-gateway.line.job.v1"
WORK = "com.example.work.v1"
STATION_RECIPE = {"steps": [{"name": "work", "type_id": WORK, "timeout_seconds": 10}]}
LINE_RECIPE: dict[str, Any] = {
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

    def stations(self, **more: str) -> Gateway:
        """The downstream gateway: scopes cell1 (the press) and cell2 (the paint shop);
        ``more``: further ``GATEWAY_...`` variables."""
        gateway = station_with(
            self.equipment, self.mqtt_url, self.redis_url, self.stations_prefix, **more
        )
        gateway.plugins.register(self.log, name="station-log")
        return gateway

    def line_environ(self, instance: str = "a") -> dict[str, str]:
        """The settings of an instance of the upstream gateway, the line (scope ``line``)."""
        return {
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
        }

    def line(self, instance: str = "a", **more: str) -> Gateway:
        """An instance of the line; ``more``: further ``GATEWAY_...`` variables."""
        return Gateway.from_environment(None, {**self.line_environ(instance), **more})

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[tuple[JobsMes, JobsMes, JobsMes]]:
        """The line's MES (scope ``line``), and the station scopes' (to configure them)."""
        async with (
            connect_mes(self.mqtt_url, self.name, "line") as line,
            connect_mes(self.mqtt_url, self.stations_prefix, "cell1") as press,
            connect_mes(self.mqtt_url, self.stations_prefix, "cell2") as paint,
        ):
            yield line, press, paint


async def configure_stations(*stations: JobsMes) -> None:
    """The stations' Work Master on each of ``stations``."""
    for station in stations:
        reply = await station.configure(
            "workmaster", work_master("WM-STATION", STATION_RECIPE, dataschema=DATASCHEMA)
        )
        assert return_status(reply) == OK, reply.data


async def configure(
    line_mes: JobsMes, *stations: JobsMes, recipe: dict[str, Any] = LINE_RECIPE
) -> None:
    """The stations' Work Master on each of ``stations``, then the line's."""
    await configure_stations(*stations)
    reply = await line_mes.configure(
        "workmaster", work_master("WM-LINE", recipe, dataschema=DATASCHEMA)
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


async def answers(mes: JobsMes) -> bool:
    """Whether the gateway answers ``mes`` (a call made while it is away gets no reply)."""
    try:
        await mes.call("RequestJobResponseByJobOrderID", {"JobOrderID": "J1"}, timeout=0.5)
    except TimeoutError:
        return False
    return True
