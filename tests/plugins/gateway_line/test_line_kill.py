"""The line gateway killed (SIGKILL) while a station runs its job, then restarted: the line job
finishes, and the station ran that job once (the restarted line re-sends the command, the
station refuses to store the job twice, the line follows the one it has)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.equipment import EquipmentCommand
from gateway.jobstates import JobState
from gateway.testing import running, wait_until
from gateway.testing.processes import GatewayProcess
from gateway_jobs.testing import final_response, response_data, state_texts
from tests.plugins.gateway_line.harness import (
    WORK,
    Line,
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
