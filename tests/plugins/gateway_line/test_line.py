"""A line of stations over real mosquitto and Redis (the harness: ``harness.py``): a line job
runs a job on each station and gets its results; a station's failure, the line's Abort, Pause
and Resume, a command sent again and a restarted line gateway, each as the station sees it."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.equipment import EquipmentCommand
from gateway.jobstates import JobState
from gateway.testing import running, wait_until
from gateway.testing.equipment import EquipmentFailure, silent_first
from gateway_jobs.testing import (
    final_response,
    job_order,
    response_data,
    return_status,
    state_texts,
)
from gateway_line import downstream_job_id, upstream_of
from gateway_line.link import StationLink
from tests.plugins.gateway_line.harness import (
    LINE_JOB,
    LINE_RECIPE,
    OK,
    WORK,
    Line,
    configure,
    configure_stations,
    echo,
    held_work,
    press_job,
    start_line_job,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


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


async def test_a_stop_of_the_line_job_stops_the_running_station_job(line: Line) -> None:
    release = held_work(line)
    async with running(line.stations()), running(line.line()), line.mes() as (mes, press, paint):
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        assert return_status(await mes.act("Stop", "J1")) == OK
        await wait_until(lambda: (station_job, "Stop", JobState.CLOSED) in line.log.states)
        release.set()
        response = await final_response(mes)
        await wait_until(lambda: station_job in line.log.entered(JobState.END))  # cleared
    assert state_texts(response) == ["Ended", "Closed"]


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


async def test_a_line_abort_lost_before_it_was_passed_on_reaches_the_station_on_reconciling(
    line: Line,
) -> None:
    release = held_work(line)
    async with (
        running(line.stations()),
        running(upstream := line.line(GATEWAY_LINE_RECONCILE_SECONDS="0.1")),
        line.mes() as (mes, press, paint),
    ):
        # The line hears no state change: as if the instance that aborted died at once.
        upstream.plugins.unregister(upstream.state.get(StationLink))
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        assert return_status(await mes.act("Abort", "J1")) == OK
        await wait_until(lambda: (station_job, "Abort", JobState.ABORTED) in line.log.states)
        release.set()


async def test_a_new_try_of_a_line_action_aborts_the_station_job_of_the_try_timed_out(
    line: Line,
) -> None:
    line.equipment.behaviours = {WORK: silent_first({"done": True})}
    press_step = {**LINE_RECIPE["steps"][0], "timeout_seconds": 3, "max_attempts": 2}
    async with running(line.stations()), running(line.line()), line.mes() as (mes, press, paint):
        await configure(mes, press, paint, recipe={"steps": [press_step]})
        await start_line_job(mes)
        response = await final_response(mes)
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    first, second = sorted(line.log.stored(), key=lambda job: job.rsplit(":", 1)[1])
    assert (first, "Abort", JobState.ABORTED) in line.log.states  # the station's silent job
    assert response_data(response)["press_it"]["JobOrderID"] == second
    assert response_data(response)["press_it"]["work"] == {"done": True}


async def test_a_line_gateway_down_while_the_station_finished_catches_up_from_retained_topics(
    line: Line,
) -> None:
    release = held_work(line)
    async with running(line.stations()), line.mes() as (mes, press, paint):
        async with running(line.line("a", GATEWAY_MQTT_SESSION_EXPIRY_SECONDS="0")):
            await configure(mes, press, paint)
            await start_line_job(mes)
            station_job = await press_job(line)
        release.set()  # no line gateway runs: the station's end is only in its retained topics
        await wait_until(lambda: station_job in line.log.entered(JobState.COMPLETED))
        async with running(line.line("b")):
            response = await final_response(mes)
            await wait_until(lambda: station_job in line.log.entered(JobState.END))
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    assert response_data(response)["press_it"]["JobOrderID"] == station_job
    assert line.log.entered(JobState.RUNNING).count(station_job) == 1


@pytest.mark.parametrize("paged", [False, True], ids=["index", "paged index"])
async def test_the_line_learns_of_station_jobs_it_did_not_send_from_the_stations_index(
    line: Line, paged: bool
) -> None:
    release = held_work(line)
    stations = line.stations(GATEWAY_PUBLISHER_INDEX_PAGES=str(paged).lower())
    stray = "J1:press_it:9@line"  # a try of the line job the line has no memory of
    async with running(stations), line.mes() as (mes, press, paint):
        await configure_stations(press)
        stored = await press.store(job_order(stray, work_masters=["WM-STATION"]), "StoreAndStart")
        assert return_status(stored) == OK
        await wait_until(lambda: line.equipment.received)  # it runs before the line is there
        async with running(upstream := line.line(GATEWAY_LINE_RECONCILE_SECONDS="0.1")):
            # The line hears no state change: the station's index alone names the stray job.
            upstream.plugins.unregister(upstream.state.get(StationLink))
            await configure(mes, paint)
            await start_line_job(mes)
            assert return_status(await mes.act("Abort", "J1")) == OK
            await wait_until(lambda: (stray, "Abort", JobState.ABORTED) in line.log.states)
        release.set()
