"""The southbound boundary: how recipe engines talk to equipment through driver plugins.

An engine never touches a transport. It hands an ``EquipmentCommand`` to the gateway's
``EquipmentHub`` (``gateway.equipment``), which gives it to the driver that serves the target
equipment. The driver delivers the command in its own protocol and, when the equipment answers,
hands an ``EquipmentReply`` (matched by the command's correlation id) or an ``EquipmentEvent``
(a ``pull_event`` the equipment publishes on its own) back to the hub, which passes it to the
sink that owns it. The correlation id is typed (``CorrelationId``: owner, job, step, attempt,
one format and one parse): the hub looks its owner up among the attached sinks (the recipe
runtime attaches the default owner, ``RECIPES``) and hands the reply over; an event goes to the
``RECIPES`` sink, which gives it to the job waiting for it. Replies and events may arrive at any
gateway instance: a sink must route them through shared state, never through memory of the
instance that sent the command.

The hub also keeps **liveness**: drivers report ``heartbeat(equipment)`` when the equipment
signals it is alive and ``gone(equipment)`` when it says goodbye (or its connection drops).
Equipment is online while its last heartbeat is younger than its heartbeat timeout. The state
lives in the gateway's store (keys with that timeout as TTL), so every instance sees the same.

A command to equipment known to be offline is still delivered: the equipment may come back (a
broker keeps the command for it), and a command is never dropped silently. When equipment comes
back online (its first heartbeat after it was offline), a sink that is an ``OnlineObserver`` (the
recipe engine) is told, and sends the commands still waiting for a reply again (same correlation
id) while their timeouts allow. The engine's timeout fails the action otherwise, and
``offline_reason`` tells it to say "equipment offline" instead of "no reply".

Drivers that carry commands as CloudEvents share one shape for them (whatever the transport),
so equipment and simulators read every driver's messages alike: ``command_event`` builds a
command's event, ``reply_from_event`` and ``event_from_cloudevent`` read what equipment sends
back. The extension attributes are ``EQUIPMENT_ATTRIBUTE``, ``JOB_ORDER_ATTRIBUTE`` and
``ACTION_ATTRIBUTE``.

**Routing by type.** A command that names no equipment goes to the one equipment the scope's
configuration declares for its type (``EquipmentDirectory``, set by job management from the
``TypeIds`` property of the MES's equipment configuration); with none declared it goes to a
driver that serves the type itself. ``gateway.routing`` checks a whole recipe that way before it
runs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable
from urllib.parse import urlsplit

from gateway.cloudevents import JSON, CloudEvent, utc_now
from gateway.errors import GatewayError, NotPermitted, ValidationError

if TYPE_CHECKING:
    from gateway.store import CommandLedger, LivenessRecords, Store

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_TIMEOUT = 10.0
"""Seconds without a heartbeat after which equipment counts as offline, unless the driver
reporting the heartbeat says otherwise."""

SENT_RECORD_SECONDS = 86_400.0
"""How long the hub remembers which equipment an unanswered command went to (longer when the
command's own timeout is longer): a reply later than that is refused."""


RECIPES = "recipes"
"""The owner of the recipe runtime's commands (the default owner of a correlation id)."""


@dataclass(frozen=True)
class CorrelationId:
    """Whose command a reply answers: the owner (the sink attached under that name), the job,
    the step (a recipe action) and the try.

    On the wire it is ``{job}:{step}:{attempt}`` for the ``RECIPES`` owner, so equipment sees
    the shape the drivers document, and ``{job}:{step}:{attempt}:{owner}`` for another owner.
    A step and an owner hold no ``:``; a job may.
    """

    job: str
    step: str
    attempt: int
    owner: str = RECIPES

    def __str__(self) -> str:
        text = f"{self.job}:{self.step}:{self.attempt}"
        return text if self.owner == RECIPES else f"{text}:{self.owner}"

    @classmethod
    def parse(cls, text: str) -> CorrelationId:
        """The id ``text`` spells; ``ValueError`` when it is not one of ours."""
        parts = text.rsplit(":", 2)
        if len(parts) == 3 and parts[2].isdigit() and parts[0] and parts[1]:
            return cls(parts[0], parts[1], int(parts[2]))
        parts = text.rsplit(":", 3)
        if len(parts) == 4 and parts[2].isdigit() and all(parts):
            return cls(parts[0], parts[1], int(parts[2]), parts[3])
        raise ValueError(f"correlation id {text!r} is not {{job}}:{{step}}:{{attempt}}[:{{owner}}]")


@dataclass(frozen=True)
class EquipmentCommand:
    """One ``push_command``; ``correlation_id`` is a ``CorrelationId``'s text.

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


LINK_SCHEMES = ("http", "https")


@dataclass(frozen=True)
class CommandLink:
    """Where a command's work can be followed, as the plugin that carried it out tells
    (``gateway_command_link``): a ``label`` always (a delegated job's id and where it runs),
    and the ``url`` of a page showing it, when there is one.

    The web UI shows it beside the action. ``url`` is an absolute ``http``/``https`` URL
    (``ValueError`` otherwise): a ``javascript:`` or ``data:`` link never reaches a page.
    """

    label: str
    url: str | None = None

    def __post_init__(self) -> None:
        if self.url is not None:
            check_link_url(self.url)


def check_link_url(url: str) -> str:
    """``url`` if it is an absolute http or https URL with a host; ``ValueError`` otherwise."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in LINK_SCHEMES or not parts.hostname:
        raise ValueError(f"{url!r} is no http:// or https:// URL with a host")
    return url


@dataclass(frozen=True)
class EquipmentReply:
    """The equipment's answer to the command with ``correlation_id``; ``error`` if it failed.

    ``equipment``: who answered, as the driver's transport vouches for it (the topic the broker's
    ACL let it publish on, the connection it authenticated). Set, the hub accepts the reply only
    for a command it sent to that equipment. ``None``: a reply the driver itself makes (a
    command it could not deliver), accepted as it is.
    """

    correlation_id: str
    data: Any = None
    error: str | None = None
    scope: str | None = None  # the command's scope, when the reply carries it back
    equipment: str | None = None


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


# -- the equipment CloudEvent shape (shared by the drivers that speak CloudEvents) ----------

EQUIPMENT_ATTRIBUTE = "equipment"
"""Extension attribute: the equipment's name (on commands, events and heartbeats)."""
JOB_ORDER_ATTRIBUTE = "joborderid"
"""Extension attribute: the job a command, reply or event belongs to."""
ACTION_ATTRIBUTE = "action"
"""Extension attribute: the recipe action a command carries out."""

_DEFAULT_PAYLOAD: Any = object()


def command_payload(command: EquipmentCommand) -> dict[str, Any]:
    """A command's default ``data``: ``{"parameters": {...action...}, "job_parameters":
    {...job...}}``."""
    return {
        "parameters": dict(command.parameters),
        "job_parameters": dict(command.job_parameters),
    }


def command_event(
    command: EquipmentCommand,
    source: str,
    *,
    data: Any = _DEFAULT_PAYLOAD,
    datacontenttype: str = JSON,
    id: str | None = None,
) -> CloudEvent:
    """The CloudEvent that carries ``command`` to its equipment.

    ``type`` is the action's ``type_id``, ``subject`` the scope, ``correlationid`` the
    command's correlation id, ``expiryinterval`` its timeout (a command nobody took in time is
    void), extensions ``action``, ``joborderid`` and ``equipment``. ``data`` defaults to
    ``command_payload(command)``; ``id`` to a fresh one (a driver may pass the correlation id,
    making a re-sent command a CloudEvents duplicate of the first).
    """
    extensions = {ACTION_ATTRIBUTE: command.action, JOB_ORDER_ATTRIBUTE: command.job_order_id}
    if command.equipment is not None:
        extensions[EQUIPMENT_ATTRIBUTE] = command.equipment
    timeout = command.timeout_seconds
    event = CloudEvent(
        type=command.type,
        source=source,
        subject=command.scope,
        time=utc_now(),
        datacontenttype=datacontenttype,
        data=command_payload(command) if data is _DEFAULT_PAYLOAD else data,
        correlationid=command.correlation_id,
        expiryinterval=math.ceil(timeout) if timeout else None,
        extensions=extensions,
    )
    return event if id is None else event.replace(id=id)


def reply_error(event: CloudEvent) -> str | None:
    """The failure a reply reports (``"code: message"`` from ``errorcode`` / ``errormessage``),
    or ``None`` when it reports success."""
    if event.errorcode is None and event.errormessage is None:
        return None
    error = ": ".join(part for part in (event.errorcode, event.errormessage) if part)
    return error or "equipment reported an error"


def reply_from_event(event: CloudEvent) -> EquipmentReply:
    """The ``EquipmentReply`` a reply event carries: matched by its ``correlationid``, ``data``
    as the result, ``reply_error`` as the failure, ``subject`` as the scope.

    Raises ``ValidationError`` when the event has no correlation id (it answers nothing).
    """
    if not event.correlationid:
        raise ValidationError(
            "correlationid", "an equipment reply must carry its command's correlation id"
        )
    return EquipmentReply(
        event.correlationid, data=event.data, error=reply_error(event), scope=event.subject
    )


def event_from_cloudevent(event: CloudEvent) -> EquipmentEvent:
    """The ``EquipmentEvent`` (for ``pull_event`` actions) an equipment event carries: its type,
    id and data, ``subject`` as the scope, the ``equipment`` and ``joborderid`` extensions."""
    return EquipmentEvent(
        type=event.type,
        id=event.id,
        equipment=event.extensions.get(EQUIPMENT_ATTRIBUTE),
        scope=event.subject,
        job_order_id=event.extensions.get(JOB_ORDER_ATTRIBUTE),
        data=event.data,
    )


class EquipmentSink(Protocol):
    """Where replies and events go: attached to the hub under an owner name
    (``EquipmentHub.attach``); the ``RECIPES`` sink also gets the equipment events."""

    async def reply(self, reply: EquipmentReply) -> None:
        """Record the reply durably before returning (the driver acknowledges after)."""
        ...

    async def event(self, event: EquipmentEvent) -> None:
        """Record the event durably before returning (the driver acknowledges after)."""
        ...


@runtime_checkable
class OnlineObserver(Protocol):
    """A sink that wants to know when equipment comes (back) online (optional for a sink).

    The recipe engine implements it to send again the commands the equipment may have missed
    while it was away.
    """

    async def equipment_online(self, equipment_id: str) -> None: ...


class EquipmentDriver(Protocol):
    """A driver plugin's contribution: delivers commands to the equipment it serves."""

    name: str

    def serves(self, command: EquipmentCommand) -> bool:
        """Whether this driver delivers ``command`` (by its equipment name, type or both)."""
        ...

    async def send(self, command: EquipmentCommand) -> None:
        """Deliver ``command``; the reply comes later through ``gateway.equipment.reply``."""
        ...


@runtime_checkable
class ReplierCheck(Protocol):
    """A sink that checks who may answer its commands itself (optional member of
    ``EquipmentSink``): the recipe engine knows from its own state which equipment each try went
    to and whether it still waits, so the hub keeps no record of the commands it sends with
    ``recorded=True`` (no store command per command and per reply) and hands their replies to
    ``checked_reply``, which raises ``NotPermitted`` as ``EquipmentHub.check_replier`` would."""

    async def checked_reply(self, reply: EquipmentReply) -> None:
        """``reply``, after checking its sender (``reply.equipment``, when the driver knows it)."""
        ...


@runtime_checkable
class CatchAllDriver(Protocol):
    """A driver that may serve "every equipment" (optional member of ``EquipmentDriver``):
    with ``catch_all`` true it only gets what no specific driver serves."""

    catch_all: bool


@runtime_checkable
class LivenessTracking(Protocol):
    """Implemented by drivers whose equipment sends heartbeats (optional for a driver).

    Equipment a tracking driver expects heartbeats from and that never sent one is reported
    as "never seen"; equipment nobody tracks has no liveness to report.
    """

    def expects_heartbeats(self, equipment_id: str) -> bool: ...


@dataclass(frozen=True)
class Liveness:
    """What the gateway knows about one piece of equipment being reachable.

    Times are Unix timestamps (``time.time()``) of the instance that recorded them.
    """

    online: bool
    last_seen: float | None  # the last heartbeat; None: never seen
    gone_at: float | None = None  # when it went away, if it did after its last heartbeat
    gone_reason: str | None = None  # how it went away ("disconnected", "heartbeat timeout"...)


class EquipmentDirectory(Protocol):
    """Which configured equipment of a scope declares a command or event type (its
    ``TypeIds``): implemented by job management, which keeps the station configuration."""

    async def declaring(self, scope: str, type_id: str) -> Sequence[str]:
        """The equipment of ``scope`` that declares ``type_id`` (at most one, unless the
        configuration is inconsistent), in a stable order."""
        ...


class EquipmentObservers(Protocol):
    """The observer hooks the hub calls (the gateway passes its plugin manager's ``hook``)."""

    def gateway_equipment_command_sent(
        self, *, command: EquipmentCommand, error: str | None
    ) -> Any: ...

    def gateway_equipment_replied(self, *, reply: EquipmentReply) -> Any: ...

    def gateway_equipment_event_received(self, *, event: EquipmentEvent) -> Any: ...


class EquipmentHub:
    """Routes commands to drivers and replies/events from drivers to the attached sink.

    ``store`` returns the gateway's store (``None``: no store plugin), asked each time it is
    needed because the store connects only when the gateway runs; liveness is kept in its
    ``LivenessRecords`` (``store.liveness``). Without a store, liveness is kept in this process
    only (fine for one instance, not shared). ``clock`` gives the Unix time (tests inject one).
    ``observers`` hear of every command, reply and event (the ``gateway_equipment_*`` hooks).
    """

    def __init__(
        self,
        store: Callable[[], Store | None] = lambda: None,
        *,
        heartbeat_timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT,
        clock: Callable[[], float] = time.time,
        observers: EquipmentObservers | None = None,
    ) -> None:
        self.drivers: list[EquipmentDriver] = []
        self.heartbeat_timeout_seconds = heartbeat_timeout_seconds
        self.clock = clock  # Unix time of heartbeats and departures, and "now" in explanations
        self._observers = observers
        self._store = store
        self.sinks: dict[str, EquipmentSink] = {}  # by owner
        self._local = _LocalLivenessRecords(lambda: self.clock())
        self._local_sent = _LocalCommandLedger()  # without a store
        self.directory: EquipmentDirectory | None = None  # routing by type (set_directory)

    def add_driver(self, driver: EquipmentDriver) -> None:
        if any(existing.name == driver.name for existing in self.drivers):
            raise GatewayError(f"two equipment drivers are named {driver.name!r}")
        self.drivers.append(driver)
        # Catch-all drivers last, decided once here rather than on every command sent.
        self.drivers.sort(key=_is_catch_all)

    def set_directory(self, directory: EquipmentDirectory) -> None:
        """Route commands without equipment by the types configured equipment declares."""
        self.directory = directory

    async def declaring(self, scope: str, type_id: str) -> Sequence[str]:
        """The configured equipment of ``scope`` that declares ``type_id`` (none without a
        directory)."""
        if self.directory is None:
            return ()
        return await self.directory.declaring(scope, type_id)

    async def routed(self, command: EquipmentCommand) -> EquipmentCommand:
        """``command`` with the equipment its type routes to, when it names none and exactly
        one configured equipment declares the type; otherwise unchanged (a driver serving the
        type itself, or none, decides)."""
        if command.equipment is not None:
            return command
        declared = await self.declaring(command.scope, command.type)
        if len(declared) != 1:
            return command
        return replace(command, equipment=declared[0])

    def attach(self, sink: EquipmentSink, owner: str = RECIPES) -> None:
        """Make ``sink`` receive the replies to the commands of ``owner`` (the recipe runtime
        is ``RECIPES``, and gets the events too); attaching the same sink again changes
        nothing, another sink under a taken owner is refused."""
        if ":" in owner or owner.isdigit():
            raise GatewayError(f"equipment sink owner {owner!r}: no ':' and not a number")
        attached = self.sinks.get(owner)
        if attached is not None and attached is not sink:
            raise GatewayError(f"two equipment sinks are attached as {owner!r}")
        self.sinks[owner] = sink

    def driver_for(self, command: EquipmentCommand) -> EquipmentDriver:
        """The first driver that serves ``command``; catch-all drivers are asked last.

        A driver with a true ``catch_all`` attribute (one serving "every equipment", such as
        the MQTT driver configured with ``*``) only gets what no specific driver serves,
        whatever order the plugins registered their drivers in.
        """
        for driver in self.drivers:  # ordered by ``add_driver``
            if driver.serves(command):
                return driver
        names = ", ".join(driver.name for driver in self.drivers) or "none"
        raise GatewayError(
            f"no equipment driver serves {command.type!r} for equipment "
            f"{command.equipment!r} (drivers: {names})"
        )

    async def send(self, command: EquipmentCommand, *, recorded: bool = False) -> None:
        """Hand ``command`` to its driver, after recording which equipment it goes to (in the
        store, so a reply is checked against it on whichever instance it arrives).

        ``recorded``: the sender's own state names the equipment (a ``ReplierCheck`` sink,
        which checks the reply itself), so the hub writes no record.
        """
        try:
            command = await self.routed(command)
            driver = self.driver_for(command)
            if command.equipment is not None and not recorded:
                seconds = max(SENT_RECORD_SECONDS, command.timeout_seconds or 0)
                await self._ledger().sent(command.correlation_id, command.equipment, seconds)
            await driver.send(command)
        except GatewayError as error:
            self._observe("gateway_equipment_command_sent", command=command, error=str(error))
            raise
        self._observe("gateway_equipment_command_sent", command=command, error=None)

    def _ledger(self) -> CommandLedger:
        store = self._store()
        return self._local_sent if store is None else store.commands

    async def reply(self, reply: EquipmentReply) -> None:
        """Called by drivers when equipment answers a command: to the sink of its owner.

        A reply naming its sender (``reply.equipment``) is accepted only if the command with its
        correlation id went to that equipment and is still unanswered; ``NotPermitted``
        otherwise, and nothing reaches the engine. A ``ReplierCheck`` sink checks that itself.
        A correlation id that is not one of ours is a ``ValidationError``.
        """
        try:
            owner = CorrelationId.parse(reply.correlation_id).owner
        except ValueError as error:
            raise ValidationError("correlationid", str(error)) from None
        sink = self._sink(owner, f"reply {reply.correlation_id}")
        if _implements(type(sink), ReplierCheck):
            await cast(ReplierCheck, sink).checked_reply(reply)
        else:
            await self.check_replier(reply)
            await sink.reply(reply)
            await self.forget_command(reply.correlation_id)
        self._observe("gateway_equipment_replied", reply=reply)

    async def check_replier(self, reply: EquipmentReply) -> None:
        """``NotPermitted`` unless the command ``reply`` answers went, by the hub's record, to
        the equipment the reply names (a reply naming none is not checked)."""
        if reply.equipment is None:
            return
        addressee = await self._ledger().addressee(reply.correlation_id)
        if addressee != reply.equipment:
            sent = f"it went to {addressee}" if addressee else "none is waiting for a reply"
            raise NotPermitted(
                f"equipment {reply.equipment} may not answer command {reply.correlation_id}: {sent}"
            )

    async def forget_command(self, correlation_id: str) -> None:
        """The reply is stored (durably): a second one finds no command waiting."""
        await self._ledger().answered(correlation_id)

    def _observe(self, hook: str, **arguments: Any) -> None:
        if self._observers is None:
            return
        try:
            getattr(self._observers, hook)(**arguments)
        except Exception:  # an observer must never fail the equipment's traffic
            log.exception("a %s observer failed", hook)

    async def event(self, event: EquipmentEvent) -> None:
        """Called by drivers when equipment reports an event: to the recipe runtime, which
        gives it to the job waiting for it."""
        await self._sink(RECIPES, f"event {event.id}").event(event)
        self._observe("gateway_equipment_event_received", event=event)

    def _sink(self, owner: str, what: str) -> EquipmentSink:
        sink = self.sinks.get(owner)
        if sink is None:
            raise GatewayError(f"{what}: no equipment sink is attached as {owner!r}")
        return sink

    # -- liveness -----------------------------------------------------------------------------

    async def heartbeat(self, equipment_id: str, *, timeout_seconds: float | None = None) -> None:
        """Called by drivers: ``equipment_id`` is alive now, and for ``timeout_seconds`` more.

        ``timeout_seconds`` is the driver's heartbeat timeout (a few heartbeat intervals);
        ``None`` takes the hub's ``heartbeat_timeout_seconds``.
        """
        timeout = self.heartbeat_timeout_seconds if timeout_seconds is None else timeout_seconds
        if await self._records().heartbeat(equipment_id, self.clock(), timeout):
            await self._came_online(equipment_id)

    async def _came_online(self, equipment_id: str) -> None:
        """Tell the sinks (an engine re-sends the commands the equipment may have missed)."""
        for sink in self.sinks.values():
            if not isinstance(sink, OnlineObserver):
                continue
            try:
                await sink.equipment_online(equipment_id)
            except Exception as error:  # its commands then wait for their timeouts, as before
                log.warning(
                    "equipment %s is back, but its commands were not re-sent: %s",
                    equipment_id,
                    error,
                )

    async def gone(self, equipment_id: str, reason: str = "disconnected") -> None:
        """Called by drivers: ``equipment_id`` is offline now (it said goodbye, its connection
        dropped...); ``reason`` says how, for ``offline_reason``."""
        await self._records().gone(equipment_id, self.clock(), reason)

    async def liveness(self, equipment_id: str) -> Liveness:
        """Whether ``equipment_id`` is online, and when it was last heard of."""
        return await self._records().read(equipment_id)

    def _records(self) -> LivenessRecords:
        store = self._store()
        return self._local if store is None else store.liveness

    def tracks(self, equipment_id: str) -> bool:
        """Whether a driver expects heartbeats from ``equipment_id``."""
        return any(
            isinstance(driver, LivenessTracking) and driver.expects_heartbeats(equipment_id)
            for driver in self.drivers
        )

    async def offline_reason(self, equipment_id: str) -> str | None:
        """Why ``equipment_id`` cannot answer, or ``None`` when it is online or not tracked.

        For the engine, to explain a timeout: "equipment X offline: last heartbeat 12.3 s ago",
        "... disconnected 2.0 s ago (last heartbeat 3.1 s ago)" (the driver's reason) or
        "... never seen". Equipment that sends no heartbeats (no driver tracks it and it never
        sent one) gives ``None``.
        """
        state = await self.liveness(equipment_id)
        if state.online:
            return None
        now = self.clock()
        if state.last_seen is None and state.gone_at is None:
            if not self.tracks(equipment_id):
                return None
            return f"equipment {equipment_id} offline: never seen (no heartbeat yet)"
        last = (
            f"last heartbeat {now - state.last_seen:.1f} s ago"
            if state.last_seen is not None
            else "no heartbeat yet"
        )
        if state.gone_at is not None:
            last = f"{state.gone_reason or 'disconnected'} {now - state.gone_at:.1f} s ago ({last})"
        return f"equipment {equipment_id} offline: {last}"


class _LocalCommandLedger:
    """``CommandLedger`` in this process only (no store)."""

    def __init__(self) -> None:
        self._sent: dict[str, str] = {}

    async def sent(self, correlation_id: str, equipment_id: str, ttl_seconds: float) -> None:
        self._sent[correlation_id] = equipment_id

    async def addressee(self, correlation_id: str) -> str | None:
        return self._sent.get(correlation_id)

    async def answered(self, correlation_id: str) -> None:
        self._sent.pop(correlation_id, None)


class _LocalLivenessRecords:
    """``LivenessRecords`` in this process only (no store: one instance, nothing shared)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._states: dict[str, tuple[Liveness, float]] = {}  # id -> (state, online until)

    async def heartbeat(self, equipment_id: str, at: float, ttl_seconds: float) -> bool:
        known = self._states.get(equipment_id)
        self._states[equipment_id] = (Liveness(online=True, last_seen=at), at + ttl_seconds)
        return known is None or known[1] <= at

    async def gone(self, equipment_id: str, at: float, reason: str) -> None:
        known = self._states.get(equipment_id)
        last_seen = known[0].last_seen if known else None
        self._states[equipment_id] = (Liveness(False, last_seen, at, reason), 0.0)

    async def read(self, equipment_id: str) -> Liveness:
        known = self._states.get(equipment_id)
        if known is None:
            return Liveness(online=False, last_seen=None)
        state, until = known
        return replace(state, online=until > self._clock())


def _is_catch_all(driver: EquipmentDriver) -> bool:
    return isinstance(driver, CatchAllDriver) and driver.catch_all


@cache
def _implements(kind: type, protocol: type) -> bool:
    """``isinstance`` for a runtime-checkable protocol of methods, decided once per class: the
    check looks at every member, too slow to repeat on each reply."""
    return issubclass(kind, protocol)
