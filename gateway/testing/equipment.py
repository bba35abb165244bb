"""In-process equipment for tests and benchmarks: a driver that answers commands itself.

``TestEquipment`` is a real ``EquipmentDriver`` (registered through the driver hook like any
other), with the equipment's behaviour given by a function per command type. It records every
command it received, so tests can check what was sent and how often (correlation ids included).
"""

from __future__ import annotations

import inspect
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.hookspecs import hookimpl

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.equipment import EquipmentDriver
    from gateway.phases import DriverPhase
    from gateway.settings import Settings

Behaviour = Callable[[EquipmentCommand], Any]
"""Returns the reply data (or an awaitable of it); raises ``EquipmentFailure`` to answer an error,
``NoAnswer`` to stay silent."""


class EquipmentFailure(Exception):
    """Raised by a behaviour: the equipment answers with this error (and ``data``, what it
    measured while failing)."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.data = data


class NoAnswer(Exception):
    """Raised by a behaviour: the equipment never answers (the action times out)."""


class HeldCommands(list[EquipmentCommand]):
    """A behaviour that keeps every command it gets and never answers: the test answers them
    (or lets them time out)."""

    def __call__(self, command: EquipmentCommand) -> Any:
        self.append(command)
        raise NoAnswer


@dataclass
class TestEquipment:
    """A driver serving every command type in ``behaviours`` (all types when ``serve_all``)."""

    __test__ = False  # not a pytest test class

    behaviours: Mapping[str, Behaviour] = field(default_factory=dict)
    serve_all: bool = True
    name: str = "test-equipment"
    received: list[EquipmentCommand] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # correlation ids whose reply is recorded
    gateways: list[DriverPhase] = field(default_factory=list)

    # -- the driver -------------------------------------------------------------------------

    def serves(self, command: EquipmentCommand) -> bool:
        return self.serve_all or command.type in self.behaviours

    async def send(self, command: EquipmentCommand) -> None:
        self.received.append(command)
        behaviour = self.behaviours.get(command.type, _succeed)
        try:
            data = behaviour(command)
            if inspect.isawaitable(data):
                data = await data
        except NoAnswer:
            return
        except EquipmentFailure as failure:
            await self._hub(command).reply(
                EquipmentReply(command.correlation_id, data=failure.data, error=str(failure))
            )
            return
        await self._hub(command).reply(
            EquipmentReply(command.correlation_id, data=data, scope=command.scope)
        )
        self.answered.append(command.correlation_id)

    def _hub(self, command: EquipmentCommand) -> Any:
        # Any running instance's hub will do: replies are routed through shared state. (A
        # stopped instance's hub would refuse: its store is closed.)
        candidates = self._running()
        return candidates[len(self.received) % len(candidates)].equipment

    def _running(self) -> list[DriverPhase]:
        running = [gateway for gateway in self.gateways if not gateway.stopping.is_set()]
        return running or self.gateways

    # -- for tests --------------------------------------------------------------------------

    async def emit(self, type: str, data: Any = None, **where: Any) -> EquipmentEvent:
        """Publish a pull event (``where``: equipment, scope, job_order_id)."""
        event = EquipmentEvent(type=type, id=str(uuid.uuid4()), data=data, **where)
        await self._running()[0].equipment.event(event)
        return event

    def sent(self, type: str | None = None) -> list[EquipmentCommand]:
        return [command for command in self.received if type is None or command.type == type]

    def correlation_counts(self) -> Counter[str]:
        return Counter(command.correlation_id for command in self.received)

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
    ) -> None:
        self.gateways.append(gateway)
        register(self)


def _succeed(command: EquipmentCommand) -> Any:
    return {"ok": True}


def silent_first(data: Any) -> Callable[[EquipmentCommand], Any]:
    """A behaviour that leaves its first command unanswered and answers ``data`` to the others
    (a timeout, then a retry that succeeds)."""
    commands = 0

    def behaviour(command: EquipmentCommand) -> Any:
        nonlocal commands
        commands += 1
        if commands == 1:
            raise NoAnswer
        return data

    return behaviour


def answer_after(seconds: float, data: Any) -> Callable[[EquipmentCommand], Awaitable[Any]]:
    """A behaviour that answers ``data`` after a delay."""

    async def behaviour(command: EquipmentCommand) -> Any:
        await anyio.sleep(seconds)
        return data

    return behaviour


def station_with(
    equipment: TestEquipment, mqtt_url: str, redis_url: str, name: str, **environ: str
) -> Gateway:
    """A gateway over ``mqtt_url`` and ``redis_url`` whose equipment is ``equipment``, its keys,
    topics and share group named after ``name`` (unique per test), its SFC timers polled every
    10 ms; ``environ``: more ``GATEWAY_...`` variables."""
    from gateway.app import Gateway

    settings = {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": name,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": name,
        "GATEWAY_GATEWAY_INSTANCE_ID": name,
        "GATEWAY_JOBS_TOPIC_PREFIX": name,
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
        **environ,
    }
    return Gateway.from_environment(None, settings, extra_plugins={"equipment": equipment})
