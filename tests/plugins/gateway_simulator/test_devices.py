"""The simulated devices on their own (no transport): behaviour, randomness, idempotency."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from gateway_simulator.devices import (
    Device,
    DeviceCommand,
    DeviceError,
    DeviceEvent,
    SimulatedStation,
    parse_torque,
)
from gateway_simulator.settings import SimulatorSettings

FAST = SimulatorSettings(
    enabled=True, position_seconds=0, tighten_seconds=0, inspect_seconds=0, seed=7
)
TIGHTEN = "com.example.station.tighten.v1"
POSITION = "com.example.station.position.v1"


def station(**changes: Any) -> tuple[SimulatedStation, list[tuple[str, DeviceEvent]]]:
    """A station whose devices' events are collected as (device, event)."""
    simulated = SimulatedStation(dataclasses.replace(FAST, **changes))
    emitted: list[tuple[str, DeviceEvent]] = []
    for device in simulated.devices.values():
        device.emit = collector(device, emitted)
    return simulated, emitted


def collector(device: Device, emitted: list[tuple[str, DeviceEvent]]) -> Any:
    async def emit(event: DeviceEvent) -> None:
        emitted.append((device.name, event))

    return emit


def tighten(correlation_id: str = "J1:tighten:1", **parameters: Any) -> DeviceCommand:
    data = {"parameters": parameters, "job_parameters": {}}
    return DeviceCommand(correlation_id, TIGHTEN, data, scope="cell1", job_order_id="J1")


@pytest.mark.parametrize(
    ("spec", "value"), [(85, 85.0), (85.5, 85.5), ("85Nm", 85.0), ("85 Nm", 85.0), ("12.5", 12.5)]
)
def test_torque_specs_are_read_in_newton_metres(spec: Any, value: float) -> None:
    assert parse_torque(spec) == value


@pytest.mark.parametrize("spec", ["eighty", "85 ft-lb", True, None])
def test_a_torque_spec_that_is_no_torque_is_an_invalid_request(spec: Any) -> None:
    with pytest.raises(DeviceError, match="invalid-request"):
        parse_torque(spec)


@pytest.mark.anyio
async def test_the_tightener_answers_around_the_set_point_and_reports_the_torque_result() -> None:
    simulated, emitted = station(torque_noise=0.5)
    answer = await simulated.devices["tightener"].answer(tighten(torque_spec="40Nm"))
    assert not answer.failed
    assert answer.data["setpoint"] == 40.0
    assert abs(answer.data["torque"] - 40.0) < 3
    assert answer.data["torque_ok"] is True
    [(device, event)] = emitted
    assert device == "tightener"
    assert event.type == "com.example.station.torque_result.v1"
    assert (event.scope, event.job_order_id) == ("cell1", "J1")
    assert event.data == answer.data


@pytest.mark.anyio
async def test_a_station_knowing_no_jobs_reports_events_naming_neither_job_nor_scope() -> None:
    simulated, emitted = station(events_name_job=False)
    answer = await simulated.devices["tightener"].answer(tighten())
    [(device, event)] = emitted
    assert (device, event.data) == ("tightener", answer.data)
    assert (event.scope, event.job_order_id) == (None, None)


@pytest.mark.anyio
async def test_the_set_point_comes_from_the_job_when_the_action_has_none() -> None:
    simulated, _ = station(torque_noise=0)
    command = DeviceCommand(
        "J1:tighten:1", TIGHTEN, {"parameters": {}, "job_parameters": {"torque_spec": 60}}
    )
    answer = await simulated.devices["tightener"].answer(command)
    assert answer.data["torque"] == 60.0
    default = await simulated.devices["tightener"].answer(tighten("J2:tighten:1"))
    assert default.data["setpoint"] == FAST.torque_setpoint


@pytest.mark.anyio
async def test_the_same_seed_gives_the_same_torques() -> None:
    torques = []
    for _ in range(2):
        simulated, _ = station(seed=42)
        device = simulated.devices["tightener"]
        answers = [await device.answer(tighten(f"J{n}:tighten:1")) for n in range(5)]
        torques.append([answer.data["torque"] for answer in answers])
    assert torques[0] == torques[1]
    assert len(set(torques[0])) > 1


@pytest.mark.anyio
async def test_out_of_tolerance_is_not_ok_and_the_failure_rate_fails_commands() -> None:
    simulated, _ = station(torque_noise=5, torque_tolerance_percent=0)
    answer = await simulated.devices["tightener"].answer(tighten())
    assert answer.data["torque_ok"] is False
    simulated, emitted = station(failure_rate=1)
    answer = await simulated.devices["tightener"].answer(tighten())
    assert (answer.error_code, answer.error_message) == (
        "tightening-failed",
        "spindle fault: torque not reached",
    )
    assert emitted == []  # a failed tightening has no torque result


@pytest.mark.anyio
async def test_a_repeated_correlation_id_gets_the_first_answer_without_doing_it_again() -> None:
    simulated, emitted = station()
    device = simulated.devices["tightener"]
    first = await device.answer(tighten())
    again = await device.answer(tighten())
    assert again == first
    assert (device.handled, device.repeated) == (1, 1)
    assert len(emitted) == 1
    failing, _ = station(failure_rate=1)
    broken = failing.devices["tightener"]
    assert await broken.answer(tighten()) == await broken.answer(tighten())


@pytest.mark.anyio
async def test_a_repetition_during_the_work_waits_for_the_first_answer() -> None:
    simulated, emitted = station(tighten_seconds=0.1)
    device = simulated.devices["tightener"]
    answers = []

    async def ask() -> None:
        answers.append(await device.answer(tighten()))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ask)
        tasks.start_soon(ask)
    assert answers[0] == answers[1]
    assert (device.handled, device.repeated) == (1, 1)
    assert len(emitted) == 1


@pytest.mark.anyio
async def test_an_unknown_command_type_is_refused() -> None:
    simulated, _ = station()
    answer = await simulated.devices["positioner"].answer(
        DeviceCommand("J1:x:1", "com.example.station.weld.v1")
    )
    assert answer.error_code == "unknown-command"
    assert "weld" in (answer.error_message or "")


@pytest.mark.anyio
async def test_the_camera_inspects_the_part_the_positioner_put_in_place() -> None:
    simulated, emitted = station()
    command = DeviceCommand(
        "J1:position_axle:1", POSITION, {"parameters": {}}, scope="cell1", job_order_id="J1"
    )
    async with simulated.running():
        answer = await simulated.devices["positioner"].answer(command)
        assert answer.data["in_position"] is True
        with anyio.fail_after(2):
            while not emitted:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    [(device, event)] = emitted
    assert device == "camera"
    assert event.type == "com.example.station.qa_result.v1"
    assert (event.scope, event.job_order_id) == ("cell1", "J1")
    assert event.data == {"passed": True, "defects": 0, "image": "sim://camera/J1.png"}


@pytest.mark.anyio
async def test_the_camera_also_inspects_on_command_and_answers_the_result() -> None:
    simulated, emitted = station(qa_fail_rate=1)
    command = DeviceCommand("J1:qa:1", "com.example.station.inspect.v1", job_order_id="J1")
    answer = await simulated.devices["camera"].answer(command)
    assert answer.data["passed"] is False
    assert 1 <= answer.data["defects"] <= 3
    assert [event.data for _, event in emitted] == [answer.data]


def test_equipment_can_be_left_out_and_names_must_differ() -> None:
    simulated, _ = station(camera="")
    assert set(simulated.devices) == {"positioner", "tightener"}
    assert simulated.camera is None
    with pytest.raises(ValueError, match="names must differ"):
        SimulatorSettings(camera="tightener")
    with pytest.raises(ValueError, match="failure_rate"):
        SimulatorSettings(failure_rate=1.5)
