"""The southbound boundary: how recipe engines talk to equipment through driver plugins.

An engine never touches a transport. It hands an ``EquipmentCommand`` to the gateway's
``EquipmentHub`` (``gateway.equipment``), which gives it to the driver that serves the target
equipment. The driver delivers the command in its own protocol and, when the equipment answers,
hands an ``EquipmentReply`` (matched by the command's correlation id) or an ``EquipmentEvent``
(a ``pull_event`` the equipment publishes on its own) back to the hub, which passes it to the
sink the engine attached. Replies and events may arrive at any gateway instance: the sink must
route them through shared state, never through memory of the instance that sent the command.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.errors import GatewayError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EquipmentCommand:
    """One ``push_command``; ``correlation_id`` is ``{job}:{action}:{attempt}``.

    A re-sent command (after a crash or a redelivery) carries the same correlation id, so the
    equipment can recognise and ignore the repetition (the idempotency contract).
    """

    correlation_id: str
    type: str
    equipment: str | None
    scope: str
    job_order_id: str
    action: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    job_parameters: Mapping[str, Any] = field(default_factory=dict)
    timeout_seconds: float | None = None


@dataclass(frozen=True)
class EquipmentReply:
    """The equipment's answer to the command with ``correlation_id``; ``error`` if it failed."""

    correlation_id: str
    data: Any = None
    error: str | None = None
    scope: str | None = None  # the command's scope, when the reply carries it back


@dataclass(frozen=True)
class EquipmentEvent:
    """Something the equipment reports unasked (a ``pull_event``), e.g. a QA result.

    ``scope`` and ``job_order_id`` narrow which waiting job it is for, when the equipment knows.
    """

    type: str
    id: str
    equipment: str | None = None
    scope: str | None = None
    job_order_id: str | None = None
    data: Any = None


class EquipmentSink(Protocol):
    """Where replies and events go (implemented by the recipe engine)."""

    async def reply(self, reply: EquipmentReply) -> None:
        """Record the reply durably before returning (the driver acknowledges after)."""
        ...

    async def event(self, event: EquipmentEvent) -> None:
        """Record the event durably before returning (the driver acknowledges after)."""
        ...


class EquipmentDriver(Protocol):
    """A driver plugin's contribution: delivers commands to the equipment it serves."""

    name: str

    def serves(self, command: EquipmentCommand) -> bool:
        """Whether this driver delivers ``command`` (by its equipment name, type or both)."""
        ...

    async def send(self, command: EquipmentCommand) -> None:
        """Deliver ``command``; the reply comes later through ``gateway.equipment.reply``."""
        ...


class EquipmentHub:
    """Routes commands to drivers and replies/events from drivers to the attached sink."""

    def __init__(self) -> None:
        self.drivers: list[EquipmentDriver] = []
        self._sink: EquipmentSink | None = None

    def add_driver(self, driver: EquipmentDriver) -> None:
        if any(existing.name == driver.name for existing in self.drivers):
            raise GatewayError(f"two equipment drivers are named {driver.name!r}")
        self.drivers.append(driver)

    def attach(self, sink: EquipmentSink) -> None:
        """Make ``sink`` receive every reply and event (one engine per gateway)."""
        if self._sink is not None and self._sink is not sink:
            raise GatewayError("an equipment sink is already attached")
        self._sink = sink

    def driver_for(self, command: EquipmentCommand) -> EquipmentDriver:
        for driver in self.drivers:
            if driver.serves(command):
                return driver
        names = ", ".join(driver.name for driver in self.drivers) or "none"
        raise GatewayError(
            f"no equipment driver serves {command.type!r} for equipment "
            f"{command.equipment!r} (drivers: {names})"
        )

    async def send(self, command: EquipmentCommand) -> None:
        await self.driver_for(command).send(command)

    async def reply(self, reply: EquipmentReply) -> None:
        """Called by drivers when equipment answers a command."""
        await self._attached().reply(reply)

    async def event(self, event: EquipmentEvent) -> None:
        """Called by drivers when equipment reports an event."""
        await self._attached().event(event)

    def _attached(self) -> EquipmentSink:
        if self._sink is None:
            raise GatewayError("equipment reported something, but no recipe engine is attached")
        return self._sink
