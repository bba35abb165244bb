"""The line's pure parts: station job ids, job orders, outcomes, settings, reconciliation."""

from __future__ import annotations

import pytest

from gateway.equipment import CorrelationId, EquipmentCommand
from gateway.errors import SettingsError
from gateway.jobstates import JobState
from gateway.settings import Secret, Settings, SettingsRegistry, load_settings
from gateway_line import LineSettings, Station, downstream_job_id, job_order, outcome, upstream_of
from gateway_line.follower import reconciling_method
from gateway_line.link import propagated_method
from gateway_line.plugin import broker_url
from gateway_mqtt import MqttSettings


def command(**fields: object) -> EquipmentCommand:
    values: dict[str, object] = {
        "correlation_id": "J:7:press_it:2",
        "type": "io.github.station-gateway.line.job.v1",
        "equipment": "press",
        "scope": "line",
        "job_order_id": "J:7",
        "action": "press_it",
        "parameters": {"WorkMasterID": ["WM-A", "WM-B"], "Priority": 3, "force_kn": 12},
        "job_parameters": {"serial": "SN-7", "force_kn": 10},
    }
    values.update(fields)
    return EquipmentCommand(**values)  # type: ignore[arg-type]


def test_the_station_job_id_is_the_try_and_reads_back_to_it() -> None:
    job_order_id = downstream_job_id(command())
    assert job_order_id == "J:7:press_it:2@line"
    upstream = upstream_of(job_order_id)
    assert upstream is not None
    assert (upstream.scope, upstream.correlation) == ("line", CorrelationId("J:7", "press_it", 2))


@pytest.mark.parametrize("text", ["J1", "J1@line", "J1:a:x@line", "J1:a:1@", "AXLE-0001"])
def test_ids_the_line_did_not_make_are_none_of_its_jobs(text: str) -> None:
    assert upstream_of(text) is None


def test_a_too_long_station_job_id_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than 256"):
        downstream_job_id(command(correlation_id="J" * 250 + ":press_it:1"))


def test_the_job_order_takes_the_jobs_parameters_then_the_actions() -> None:
    assert job_order(command()) == {
        "JobOrderID": "J:7:press_it:2@line",
        "WorkMasterID": [{"ID": "WM-A"}, {"ID": "WM-B"}],
        "Priority": 3,
        "JobOrderParameters": [
            {"ID": "serial", "Value": "SN-7"},
            {"ID": "force_kn", "Value": 12},
        ],
    }
    bare = job_order(command(parameters={}, job_parameters={}))
    assert bare == {"JobOrderID": "J:7:press_it:2@line"}  # the station's default Work Master


def response(*states: str, **data: object) -> dict[str, object]:
    return {
        "JobOrderID": "J1:press_it:1@line",
        "JobState": [{"StateText": {"Text": state}} for state in states],
        "JobResponseData": [{"ID": key, "Value": value} for key, value in data.items()],
    }


def test_a_completed_station_job_gives_its_results() -> None:
    ended = outcome("press", response("Ended", "Completed", work={"ok": True}))
    assert ended is not None
    assert ended.error is None
    assert ended.data == {"work": {"ok": True}, "JobOrderID": "J1:press_it:1@line"}


def test_an_aborted_or_stopped_station_job_is_an_error_with_the_stations_reason() -> None:
    aborted = outcome("press", response("Aborted", Error="step work: jammed"))
    assert aborted is not None
    assert aborted.error == "station press job J1:press_it:1@line Aborted: step work: jammed"
    stopped = outcome("press", response("Ended", "Closed"))
    assert stopped is not None
    assert stopped.error == "station press job J1:press_it:1@line Ended.Closed: no reason given"


def test_a_station_job_not_ended_has_no_outcome_yet() -> None:
    assert outcome("press", response("Running")) is None
    assert outcome("press", response("Interrupted", "Suspended")) is None


def line_settings(stations: str) -> Settings:
    registry = SettingsRegistry()
    registry.register("line", LineSettings)
    return load_settings(registry, environ={"GATEWAY_LINE_STATIONS": stations})


def test_stations_are_equipment_and_scope() -> None:
    settings = line_settings("press=cell1, paint").get(LineSettings)
    assert settings.line() == [Station("press", "cell1"), Station("paint", "paint")]


@pytest.mark.parametrize(
    ("stations", "complaint"),
    [("press=cell/1", "one MQTT topic level"), ("press=a,press=b", "press named twice")],
)
def test_bad_stations_stop_start_up(stations: str, complaint: str) -> None:
    with pytest.raises(SettingsError, match=complaint):
        line_settings(stations)


def test_the_broker_is_the_lines_own_else_the_gateways_with_its_login() -> None:
    mqtt = MqttSettings(url="mqtt://broker:1883", username="gw", password=Secret("p@ss"))
    assert broker_url(LineSettings(), mqtt) == "mqtt://gw:p%40ss@broker:1883"
    own = LineSettings(url="mqtts://line:8883", username="mes", password=Secret("x"))
    assert broker_url(own, mqtt) == "mqtts://mes:x@line:8883"
    assert broker_url(LineSettings(url="mqtt://line:1883"), mqtt) == "mqtt://line:1883"


@pytest.mark.parametrize(
    ("previous", "current", "method"),
    [
        (JobState.RUNNING, JobState.SUSPENDED, "Pause"),
        (JobState.SUSPENDED, JobState.RUNNING, "Resume"),
        (JobState.HELD, JobState.RUNNING, "Resume"),
        (JobState.RUNNING, JobState.CLOSED, "Stop"),
        (JobState.RUNNING, JobState.ABORTED, "Abort"),
        (JobState.RUNNING, JobState.COMPLETED, None),
        (JobState.ALLOWED_TO_START_READY, JobState.RUNNING, None),
        (JobState.RUNNING, JobState.HELD, None),
    ],
)
def test_upstream_changes_passed_on(
    previous: JobState, current: JobState, method: str | None
) -> None:
    assert propagated_method(previous, current) == method


@pytest.mark.parametrize(
    ("upstream", "station", "catching_up", "method"),
    [
        (JobState.ABORTED, "Running", False, "Abort"),
        (JobState.COMPLETED, "Interrupted.Suspended", False, "Abort"),
        (JobState.CLOSED, "Running", False, "Stop"),
        (JobState.SUSPENDED, "Running", False, None),  # a live Pause came through the hook
        (JobState.SUSPENDED, "Running", True, "Pause"),
        (JobState.RUNNING, "Interrupted.Suspended", True, "Resume"),
        (JobState.RUNNING, "Running", True, None),
        (None, "Running", True, None),  # not this gateway's job
    ],
)
def test_reconciling_a_station_job_with_its_upstream_job(
    upstream: JobState | None, station: str, catching_up: bool, method: str | None
) -> None:
    assert reconciling_method(upstream, station, catching_up=catching_up) == method
