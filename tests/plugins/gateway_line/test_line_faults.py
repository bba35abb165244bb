"""A line under faults: the line gateway killed (SIGKILL) while a station runs its job, then
restarted (the line job finishes, and the station ran that job once: the restarted line re-sends
the command, the station refuses to store the job twice, the line follows the one it has); the
broker restarted (without persistence) while a station job runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.equipment import EquipmentCommand
from gateway.jobstates import JobState
from gateway.testing import poll_until, running, wait_until
from gateway.testing.processes import GatewayProcess
from gateway.testing.services import ServerProcess, mosquitto
from gateway_jobs.testing import final_response, response_data, state_texts
from tests.plugins.gateway_line.harness import (
    WORK,
    Line,
    answers,
    configure,
    echo,
    press_job,
    start_line_job,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def line_process(line: Line, tmp_path: Path) -> Iterator[GatewayProcess]:
    """The line gateway as a process of its own (``gateway run``), to kill."""
    environ = {
        **{key: value for key, value in os.environ.items() if not key.startswith("GATEWAY_")},
        **line.line_environ("a"),
        "GATEWAY_RUNTIME_CLAIM_IDLE_SECONDS": "1",
        "GATEWAY_RUNTIME_RECONCILE_SECONDS": "1",
        "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path / "data"),
    }
    process = GatewayProcess(
        None, environ, tmp_path / "line.log", " started (role all)", arguments=("run",)
    )
    try:
        yield process
    finally:
        process.stop()


async def started(process: GatewayProcess) -> None:
    process.start()
    await wait_until(lambda: process.ready() or process.returncode is not None, timeout=60)
    assert process.returncode is None, process.log.read_text()[-3000:]


async def test_a_line_gateway_killed_mid_job_finishes_it_after_a_restart_with_one_station_job(
    line: Line, line_process: GatewayProcess
) -> None:
    release = anyio.Event()

    async def held(command: EquipmentCommand) -> Any:
        await release.wait()
        return echo(command)

    line.equipment.behaviours = {WORK: held}
    async with running(line.stations()), line.mes() as (mes, press, paint):
        await started(line_process)
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        line_process.kill()
        await started(line_process)
        release.set()
        response = await final_response(mes, timeout=30)
        await wait_until(lambda: len(line.log.entered(JobState.END)) == 2)
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    stored = line.log.stored()
    assert len(stored) == len(set(stored)) == 2  # each station job stored once
    assert station_job in stored
    assert line.log.entered(JobState.RUNNING).count(station_job) == 1


@pytest.fixture
def own_broker() -> Iterator[ServerProcess]:
    """A mosquitto of this test's own (no persistence), which it restarts."""
    broker = mosquitto().start()
    try:
        yield broker
    finally:
        broker.close()


async def test_a_broker_restarted_while_a_station_works_loses_no_station_job(
    own_broker: ServerProcess, redis_url: str, unique: str
) -> None:
    line = Line(f"mqtt://127.0.0.1:{own_broker.port}", redis_url, unique)
    release = anyio.Event()

    async def held(command: EquipmentCommand) -> Any:
        await release.wait()
        return echo(command)

    line.equipment.behaviours = {WORK: held}
    fast_reconnects = {
        "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "0.5",
        "GATEWAY_LINE_RECONNECT_MAX_SECONDS": "0.5",
        # A StoreAndStart lost with the broker's sessions is sent again soon (the same job).
        "GATEWAY_LINE_REQUEST_TIMEOUT_SECONDS": "1",
        "GATEWAY_RUNTIME_OUTBOX_GRACE_SECONDS": "0.5",
    }
    async with running(line.stations()), running(line.line(**fast_reconnects)):
        async with line.mes() as (mes, press, paint):
            await configure(mes, press, paint)
            await start_line_job(mes)
            station_job = await press_job(line)
        await anyio.to_thread.run_sync(own_broker.restart)  # every retained topic is gone
        release.set()
        async with line.mes() as (mes, _, _):
            await poll_until(lambda: answers(mes), timeout=20)  # the line is back on the broker
            response = await final_response(mes, timeout=30)
        await wait_until(lambda: len(line.log.entered(JobState.END)) == 2)
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    assert response_data(response)["press_it"]["JobOrderID"] == station_job
    stored = line.log.stored()
    assert len(stored) == len(set(stored)) == 2
