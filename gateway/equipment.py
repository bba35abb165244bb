"""The southbound boundary: how recipe engines talk to equipment through driver plugins.

An engine never touches a transport. It hands an ``EquipmentCommand`` to the gateway's
``EquipmentHub`` (``gateway.equipment``), which gives it to the driver that serves the target
equipment. The driver delivers the command in its own protocol and, when the equipment answers,
hands an ``EquipmentReply`` (matched by the command's correlation id) or an ``EquipmentEvent``
(a ``pull_event`` the equipment publishes on its own) back to the hub, which passes it to the
sink the engine attached. Replies and events may arrive at any gateway instance: the sink must
route them through shared state, never through memory of the instance that sent the command.

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
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gateway.cloudevents import JSON, CloudEvent, utc_now
from gateway.errors import GatewayError, NotPermitted, ValidationError

if TYPE_CHECKING:
    from gateway.store import Store

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_TIMEOUT = 10.0
"""Seconds without a heartbeat after which equipment counts as offline, unless the driver
reporting the heartbeat says otherwise."""

SENT_RECORD_SECONDS = 86_400.0
"""How long the hub remembers which equipment an unanswered command went to (longer when the
command's own timeout is longer): a reply later than that is refused."""


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
    """Where replies and events go (implemented by the recipe engine)."""

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
    needed because the store connects only when the gateway runs. Without a store, liveness is
    kept in this process only (fine for one instance, not shared). ``observers`` hear of every
    command, reply and event (the ``gateway_equipment_*`` hooks).
    """

    def __init__(
        self,
        store: Callable[[], Store | None] = lambda: None,
        *,
        heartbeat_timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT,
        observers: EquipmentObservers | None = None,
    ) -> None:
        self.drivers: list[EquipmentDriver] = []
        self.heartbeat_timeout_seconds = heartbeat_timeout_seconds
        self._observers = observers
        self._store = store
        self._sink: EquipmentSink | None = None
        self._local: dict[str, _LocalLiveness] = {}
        self._local_sent: dict[str, str] = {}  # correlation id -> equipment, without a store

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
        """The first driver that serves ``command``; catch-all drivers are asked last.

        A driver with a true ``catch_all`` attribute (one serving "every equipment", such as
        the MQTT driver configured with ``*``) only gets what no specific driver serves,
        whatever order the plugins registered their drivers in.
        """
        for driver in sorted(self.drivers, key=_is_catch_all):
            if driver.serves(command):
                return driver
        names = ", ".join(driver.name for driver in self.drivers) or "none"
        raise GatewayError(
            f"no equipment driver serves {command.type!r} for equipment "
            f"{command.equipment!r} (drivers: {names})"
        )

    async def send(self, command: EquipmentCommand) -> None:
        """Hand ``command`` to its driver, after recording which equipment it goes to (in the
        store, so a reply is checked against it on whichever instance it arrives)."""
        try:
            driver = self.driver_for(command)
            if command.equipment is not None:
                await self._sent(command.correlation_id, command.equipment, command.timeout_seconds)
            await driver.send(command)
        except GatewayError as error:
            self._observe("gateway_equipment_command_sent", command=command, error=str(error))
            raise
        self._observe("gateway_equipment_command_sent", command=command, error=None)

    async def reply(self, reply: EquipmentReply) -> None:
        """Called by drivers when equipment answers a command.

        A reply naming its sender (``reply.equipment``) is accepted only if the command with its
        correlation id went to that equipment and is still unanswered; ``NotPermitted``
        otherwise, and nothing reaches the engine.
        """
        if reply.equipment is not None:
            addressee = await self._addressee(reply.correlation_id)
            if addressee != reply.equipment:
                sent = f"it went to {addressee}" if addressee else "none is waiting for a reply"
                raise NotPermitted(
                    f"equipment {reply.equipment} may not answer command "
                    f"{reply.correlation_id}: {sent}"
                )
        await self._attached().reply(reply)
        await self._answered(reply.correlation_id)
        self._observe("gateway_equipment_replied", reply=reply)

    async def event(self, event: EquipmentEvent) -> None:
        """Called by drivers when equipment reports an event."""
        await self._attached().event(event)
        self._observe("gateway_equipment_event_received", event=event)

    def _observe(self, hook: str, **arguments: Any) -> None:
        if self._observers is None:
            return
        try:
            getattr(self._observers, hook)(**arguments)
        except Exception:  # an observer must never fail the equipment's traffic
            log.exception("a %s observer failed", hook)

    # -- which equipment each command went to -------------------------------------------------

    async def _sent(self, correlation_id: str, equipment_id: str, timeout: float | None) -> None:
        seconds = max(SENT_RECORD_SECONDS, timeout or 0)
        store = self._store()
        if store is None:
            self._local_sent[correlation_id] = equipment_id
            return
        key = store.keys.global_key("equipment", "sent", correlation_id)
        await store.client.set(key, equipment_id, px=round(seconds * 1000))

    async def _addressee(self, correlation_id: str) -> str | None:
        store = self._store()
        if store is None:
            return self._local_sent.get(correlation_id)
        value = await store.client.get(store.keys.global_key("equipment", "sent", correlation_id))
        return str(value) if value is not None else None

    async def _answered(self, correlation_id: str) -> None:
        """The engine has the reply (durably): a second one finds no command waiting."""
        store = self._store()
        if store is None:
            self._local_sent.pop(correlation_id, None)
            return
        await store.client.delete(store.keys.global_key("equipment", "sent", correlation_id))

    def _attached(self) -> EquipmentSink:
        if self._sink is None:
            raise GatewayError("equipment reported something, but no recipe engine is attached")
        return self._sink

    # -- liveness -----------------------------------------------------------------------------

    async def heartbeat(self, equipment_id: str, *, timeout_seconds: float | None = None) -> None:
        """Called by drivers: ``equipment_id`` is alive now, and for ``timeout_seconds`` more.

        ``timeout_seconds`` is the driver's heartbeat timeout (a few heartbeat intervals);
        ``None`` takes the hub's ``heartbeat_timeout_seconds``.
        """
        now = time.time()
        timeout = self.heartbeat_timeout_seconds if timeout_seconds is None else timeout_seconds
        store = self._store()
        if store is None:
            known = self._local.get(equipment_id)
            self._local[equipment_id] = _LocalLiveness(now, now + timeout)
            if known is None or known.expires <= now:
                await self._came_online(equipment_id)
            return
        keys = _LivenessKeys(store, equipment_id)
        async with store.client.pipeline(transaction=True) as pipe:
            # GET: the previous value, so exactly one instance sees it come back.
            pipe.set(keys.online, repr(now), px=max(1, round(timeout * 1000)), get=True)
            pipe.hset(keys.last_seen, equipment_id, repr(now))
            pipe.hdel(keys.gone, equipment_id)
            previous, *_ = await pipe.execute()
        if previous is None:
            await self._came_online(equipment_id)

    async def _came_online(self, equipment_id: str) -> None:
        """Tell the sink (the engine re-sends the commands the equipment may have missed)."""
        sink: object = self._sink  # an EquipmentSink, which may also be an OnlineObserver
        if not isinstance(sink, OnlineObserver):
            return
        try:
            await sink.equipment_online(equipment_id)
        except Exception as error:  # its commands then wait for their timeouts, as before
            log.warning(
                "equipment %s is back, but its commands were not re-sent: %s", equipment_id, error
            )

    async def gone(self, equipment_id: str, reason: str = "disconnected") -> None:
        """Called by drivers: ``equipment_id`` is offline now (it said goodbye, its connection
        dropped...); ``reason`` says how, for ``offline_reason``."""
        now = time.time()
        store = self._store()
        if store is None:
            known = self._local.get(equipment_id)
            last_seen = known.last_seen if known else None
            self._local[equipment_id] = _LocalLiveness(last_seen, 0, now, reason)
            return
        keys = _LivenessKeys(store, equipment_id)
        async with store.client.pipeline(transaction=True) as pipe:
            pipe.delete(keys.online)
            pipe.hset(keys.gone, equipment_id, json.dumps({"at": now, "reason": reason}))
            await pipe.execute()

    async def liveness(self, equipment_id: str) -> Liveness:
        """Whether ``equipment_id`` is online, and when it was last heard of."""
        store = self._store()
        if store is None:
            known = self._local.get(equipment_id)
            if known is None:
                return Liveness(online=False, last_seen=None)
            online = known.expires > time.time()
            return Liveness(online, known.last_seen, known.gone_at, known.gone_reason)
        keys = _LivenessKeys(store, equipment_id)
        async with store.client.pipeline(transaction=False) as pipe:
            pipe.exists(keys.online)
            pipe.hget(keys.last_seen, equipment_id)
            pipe.hget(keys.gone, equipment_id)
            online, last_seen, gone = await pipe.execute()
        goodbye = json.loads(gone) if gone is not None else {}
        return Liveness(
            online=bool(online),
            last_seen=float(last_seen) if last_seen is not None else None,
            gone_at=goodbye.get("at"),
            gone_reason=goodbye.get("reason"),
        )

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
        now = time.time()
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


@dataclass(frozen=True)
class _LocalLiveness:
    last_seen: float | None
    expires: float
    gone_at: float | None = None
    gone_reason: str | None = None


class _LivenessKeys:
    """Liveness keys (global: equipment belongs to no scope).

    ``equipment:online:<id>`` exists while the equipment is online (TTL = heartbeat timeout, so
    Redis's clock decides, the same for every instance); the ``equipment:last-seen`` hash keeps
    the time of the last heartbeat, ``equipment:gone`` the time and reason of a departure since
    (JSON), for the explanation after the key is gone.
    """

    def __init__(self, store: Store, equipment_id: str) -> None:
        self.online = store.keys.global_key("equipment", "online", equipment_id)
        self.last_seen = store.keys.global_key("equipment", "last-seen")
        self.gone = store.keys.global_key("equipment", "gone")


def _is_catch_all(driver: EquipmentDriver) -> bool:
    return bool(getattr(driver, "catch_all", False))
