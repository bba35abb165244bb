"""The simulated station's equipment, independent of the transport it speaks.

A device answers ``DeviceCommand``s and emits ``DeviceEvent``s; a link (``gateway_simulator.
links``) carries them over MQTT or MessagePack-RPC. Devices of one station share a
``SimulatedStation``: its settings, its seeded random numbers, and what happens in the cell
(the camera inspects the part the positioner has just put in place).

Every device answers a repeated correlation id with the answer it gave the first time, without
doing the work (or emitting its events) again; a repetition that arrives while the first is
still being worked on waits for that answer.
"""

from __future__ import annotations

import logging
import random
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from gateway_simulator.settings import SimulatorSettings

log = logging.getLogger(__name__)

ANSWERS_KEPT = 10_000  # correlation ids a device remembers for repetitions
UNKNOWN_COMMAND = "unknown-command"
INVALID_REQUEST = "invalid-request"
TIGHTENING_FAILED = "tightening-failed"
INJECTED_FAULT = "injected-fault"  # simulator.faults


@dataclass(frozen=True)
class DeviceCommand:
    """A command as the device sees it (whatever transport brought it)."""

    correlation_id: str
    type: str
    data: Any = None
    scope: str | None = None
    job_order_id: str | None = None

    def parameter(self, name: str, default: Any = None) -> Any:
        """``name`` from the action's parameters, else from the job's, else ``default``.

        ``data`` is the MQTT driver's default payload ``{"parameters", "job_parameters"}``.
        """
        data = self.data if isinstance(self.data, Mapping) else {}
        for part in ("parameters", "job_parameters"):
            values = data.get(part)
            if isinstance(values, Mapping) and values.get(name) is not None:
                return values[name]
        return default


@dataclass(frozen=True)
class Answer:
    """A device's answer: ``data``, or an error code and message."""

    data: Any = None
    error_code: str | None = None
    error_message: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_code is not None


@dataclass(frozen=True)
class DeviceEvent:
    """Something a device reports on its own (a ``pull_event`` for recipes)."""

    type: str
    data: Any
    scope: str | None = None
    job_order_id: str | None = None


class DeviceError(Exception):
    """Raised by a device's ``handle``: the command fails with ``code`` and ``message``;
    ``data``: what the device measured while failing (sent with the error reply)."""

    def __init__(self, code: str, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


Emit = Callable[[DeviceEvent], Awaitable[None]]


@dataclass(frozen=True)
class StationTypes:
    """The CloudEvent types of the simulated station (``<prefix>.<name>.v1``)."""

    prefix: str

    def _type(self, name: str) -> str:
        return f"{self.prefix}.{name}.v1"

    @property
    def position(self) -> str:
        return self._type("position")

    @property
    def clamp(self) -> str:
        return self._type("clamp")

    @property
    def unclamp(self) -> str:
        return self._type("unclamp")

    @property
    def tighten(self) -> str:
        return self._type("tighten")

    @property
    def inspect(self) -> str:
        return self._type("inspect")

    @property
    def qa_result(self) -> str:
        return self._type("qa_result")

    @property
    def torque_result(self) -> str:
        return self._type("torque_result")


class Device:
    """One simulated piece of equipment; subclasses implement ``handle``."""

    kind = "device"

    def __init__(self, name: str, station: SimulatedStation) -> None:
        self.name = name
        self.station = station
        self.emit: Emit = _not_connected
        self.handled = 0  # commands worked on (repetitions not counted)
        self.repeated = 0  # repetitions answered from memory
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        self._working: dict[str, anyio.Event] = {}

    async def answer(self, command: DeviceCommand) -> Answer:
        """The answer to ``command``: worked out once per correlation id, then repeated."""
        key = command.correlation_id
        while key in self._working:
            await self._working[key].wait()
        if key in self._answers:
            self.repeated += 1
            log.info("%s: repeated command %s answered as before", self.name, key)
            return self._answers[key]
        done = self._working[key] = anyio.Event()
        try:
            self.handled += 1
            try:
                self._injected_fault(command)
                answer = Answer(data=await self.handle(command))
            except DeviceError as error:
                answer = Answer(error.data, error_code=error.code, error_message=error.message)
            self._answers[key] = answer
            if len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
        finally:
            del self._working[key]
            done.set()
        return answer

    async def handle(self, command: DeviceCommand) -> Any:
        """Carry out ``command`` and return the reply data; ``DeviceError`` to fail it."""
        raise DeviceError(UNKNOWN_COMMAND, f"{self.name} takes no commands")

    def _injected_fault(self, command: DeviceCommand) -> None:
        """``simulator.faults``: this device, or this command of it, fails."""
        faults = self.settings.faults
        verb = command.type.rsplit(".", 2)[-2] if command.type.count(".") >= 2 else command.type
        if self.name in faults or f"{self.name}.{verb}" in faults:
            raise DeviceError(INJECTED_FAULT, f"{self.name}: injected fault ({verb})")

    def expect(self, command: DeviceCommand, *types: str) -> None:
        if command.type not in types:
            raise DeviceError(
                UNKNOWN_COMMAND, f"{self.kind} {self.name} does not know {command.type!r}"
            )

    async def report(self, type: str, data: Any, command: DeviceCommand) -> None:
        """Emit an event about the part/job of ``command``, naming that job unless the station
        plays equipment that knows no jobs (``simulator.events_name_job``)."""
        if self.settings.events_name_job:
            await self.emit(DeviceEvent(type, data, command.scope, command.job_order_id))
        else:
            await self.emit(DeviceEvent(type, data))

    @property
    def settings(self) -> SimulatorSettings:
        return self.station.settings

    @property
    def rng(self) -> random.Random:
        return self.station.rng


class Positioner(Device):
    """Positioning unit: moves the part to the commanded position after a short delay."""

    kind = "positioning unit"

    async def handle(self, command: DeviceCommand) -> Any:
        self.expect(command, self.station.types.position)
        target = command.parameter("position", "fitting")
        await anyio.sleep(self.settings.position_seconds)
        deviation = round(abs(self.rng.gauss(0.0, 0.02)), 3)
        self.station.part_positioned(command)
        return {"position": target, "in_position": True, "deviation_mm": deviation}


class TighteningController(Device):
    """Tightening controller: torque around the set point, sometimes a fault.

    The set point is ``torque_spec`` (``"85Nm"``, ``"85 Nm"`` or a number) from the action's
    parameters, else from the job's, else ``simulator.torque_setpoint``. After each tightening
    it also emits a ``torque_result`` event with ``torque_ok``.
    """

    kind = "tightening controller"

    async def handle(self, command: DeviceCommand) -> Any:
        types = self.station.types
        self.expect(command, types.tighten)
        setpoint = parse_torque(command.parameter("torque_spec", self.settings.torque_setpoint))
        await anyio.sleep(self.settings.tighten_seconds)
        if self.rng.random() < self.settings.failure_rate:
            reached = round(setpoint * self.rng.uniform(0.3, 0.9), 2)
            measured = {"torque": reached, "unit": "Nm", "setpoint": setpoint}
            raise DeviceError(TIGHTENING_FAILED, "spindle fault: torque not reached", measured)
        torque = round(self.rng.gauss(setpoint, self.settings.torque_noise), 2)
        tolerance = setpoint * self.settings.torque_tolerance_percent / 100
        result = {
            "torque": torque,
            "unit": "Nm",
            "setpoint": setpoint,
            "torque_ok": abs(torque - setpoint) <= tolerance,
        }
        await self.report(types.torque_result, result, command)
        return result


class Clamp(Device):
    """Part clamp: closes on ``clamp``, opens on ``unclamp`` (what undoes it)."""

    kind = "clamp"

    async def handle(self, command: DeviceCommand) -> Any:
        types = self.station.types
        self.expect(command, types.clamp, types.unclamp)
        await anyio.sleep(self.settings.position_seconds)
        return {"closed": command.type == types.clamp}


class CameraStation(Device):
    """Camera QA station: inspects each part the positioner puts in place, or on command.

    Either way it emits a ``qa_result`` event for the part's job; an ``inspect`` command is
    also answered with the result.
    """

    kind = "camera QA station"

    async def handle(self, command: DeviceCommand) -> Any:
        self.expect(command, self.station.types.inspect)
        return await self.inspect(command)

    async def inspect(self, command: DeviceCommand) -> dict[str, Any]:
        await anyio.sleep(self.settings.inspect_seconds)
        passed = self.rng.random() >= self.settings.qa_fail_rate
        result = {
            "passed": passed,
            "defects": 0 if passed else self.rng.randint(1, 3),
            "image": f"sim://{self.name}/{command.job_order_id or command.correlation_id}.png",
        }
        await self.report(self.station.types.qa_result, result, command)
        return result


@dataclass
class SimulatedStation:
    """The cell: its devices, settings, random numbers and background work."""

    settings: SimulatorSettings
    rng: random.Random = field(init=False)
    types: StationTypes = field(init=False)
    devices: dict[str, Device] = field(init=False)
    _tasks: TaskGroup | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.settings.seed)
        self.types = StationTypes(self.settings.type_prefix)
        kinds: list[tuple[str, type[Device]]] = [
            (self.settings.positioner, Positioner),
            (self.settings.tightener, TighteningController),
            (self.settings.camera, CameraStation),
            (self.settings.clamp, Clamp),
            *((name, TighteningController) for name in self.settings.nutrunners),
        ]
        self.devices = {name: kind(name, self) for name, kind in kinds if name}

    @property
    def camera(self) -> CameraStation | None:
        camera = self.devices.get(self.settings.camera)
        return camera if isinstance(camera, CameraStation) else None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[SimulatedStation]:
        """Background work (camera inspections) runs while the block does."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield self
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    def part_positioned(self, command: DeviceCommand) -> None:
        """The positioner put the part of ``command``'s job in place: the camera looks at it."""
        camera = self.camera
        if camera is None:
            return
        if self._tasks is None:
            log.warning("station not running: the camera does not inspect %s", command.job_order_id)
            return
        self._tasks.start_soon(self._inspect, camera, command)

    @staticmethod
    async def _inspect(camera: CameraStation, command: DeviceCommand) -> None:
        try:
            await camera.inspect(command)
        except Exception:
            log.exception("camera %s: inspection of %s failed", camera.name, command.job_order_id)


_TORQUE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:nm|n·m|n\.m)?\s*$", re.IGNORECASE)


def parse_torque(spec: Any) -> float:
    """A torque set point in Nm from ``85``, ``85.5``, ``"85Nm"`` or ``"85 Nm"``."""
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return float(spec)
    match = _TORQUE.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise DeviceError(INVALID_REQUEST, f"torque_spec {spec!r} is not a torque in Nm")
    return float(match.group(1))


async def _not_connected(event: DeviceEvent) -> None:
    raise RuntimeError("the device is not connected to a link")
