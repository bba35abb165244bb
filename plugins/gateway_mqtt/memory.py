"""The MQTT transport for ``memory://`` URLs: an in-process broker with MQTT v5 semantics.

It belongs to the MQTT binding (this plugin): a gateway that runs with no broker installed.

``gateway demo`` and tests run the gateway, the MES and simulated equipment in one process. With
``memory://<name>`` as the MQTT URL they all meet on the broker registered under ``<name>``
(``get_broker``), and the MQTT binding and test clients speak to it through ``Connection``
instead of a socket. It keeps the semantics the gateway relies on, so the transport contract
suite passes on it exactly as on mosquitto:

- Topic filters with ``+`` and ``#`` (``gateway.transport.topic_matches``); QoS 0 and 1 (QoS 2 is
  served as 1, like a broker that announces Maximum QoS 1).
- QoS 1 delivery with acknowledgement: a delivered message stays *in flight* in the session until
  the client acks it. At most ``min(receive_maximum, max_inflight_messages)`` are in flight; the
  rest wait in the session queue (the flow control that makes a slow client slow the broker down,
  not lose messages).
- Persistent sessions keyed by client id: with clean start off and a session expiry interval the
  session (subscriptions, queue, in-flight messages) outlives the connection. QoS 1 messages for a
  disconnected session are queued; on reconnect the unacknowledged ones are sent again first
  (marked duplicate), then the queue. QoS 0 messages are not kept for a disconnected session.
- Bounded queues: a session queue holds at most ``max_queued_messages``; more are dropped with a
  warning and counted in ``Broker.dropped``. Like mosquitto, the broker never blocks a publisher
  on a slow or absent subscriber (that could deadlock clients that publish while handling).
- Retained messages, replaced per topic and deleted by a zero-byte retained publish (which still
  reaches current subscribers); sent on every non-shared subscribe with the retain flag set, while
  live forwarding clears it (retain-as-published off).
- Message Expiry Interval: a message is dropped once it expired before delivery started (queued
  or retained); a delivered copy carries the remaining lifetime. 0 or absent: never expires.
- Shared subscriptions ``$share/{group}/{filter}``: each message goes to one member session of the
  group. **Members are sessions, online or not, taken in turn (round robin)** - what mosquitto 2.0
  does: a message whose turn falls on a disconnected persistent member is queued in that member's
  session and delivered when it comes back; unacknowledged messages stay with the member that
  received them. When a member's session ends (expiry or clean start), its queued messages are
  discarded, not handed to another member (mosquitto does the same). Retained messages are not
  sent to shared subscriptions (MQTT v5 4.8.2).
- A second connection with a client id takes the session over and closes the first
  ("session taken over"); ``Broker.restart`` drops every connection, session and retained
  message, like restarting a mosquitto without persistence.

Not supported: will messages, subscription identifiers, no-local / retain-handling options,
topic aliases, authentication. The broker lives in one event loop at a time and is not
thread-safe; create connections from async code.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel

from gateway.codecs.mqtt import MqttMessage
from gateway.errors import GatewayError, ValidationError
from gateway.transport import topic_matches

log = logging.getLogger(__name__)

SCHEME = "memory"
NEVER_EXPIRES = 0xFFFFFFFF
"""Session Expiry Interval meaning "the session never expires" (MQTT v5 3.1.2.11.2)."""
DEFAULT_RECEIVE_MAXIMUM = 65535
_SHARE_PREFIX = "$share/"
_MAX_PACKET_ID = 65535


class ConnectionClosed(GatewayError):
    """The connection is gone (closed, taken over, broker restarted): reconnect to go on."""


# -- the registry ----------------------------------------------------------------------------

_brokers: dict[str, Broker] = {}


def get_broker(name: str) -> Broker:
    """The process-wide broker called ``name``, created on first use."""
    if not name:
        raise ValidationError("broker name", "must not be empty")
    if name not in _brokers:
        _brokers[name] = Broker(name)
    return _brokers[name]


def drop_broker(name: str) -> None:
    """Close every connection of broker ``name`` and forget it (tests clean up with this)."""
    broker = _brokers.pop(name, None)
    if broker is not None:
        broker.restart()


def broker_name(url: str) -> str | None:
    """The broker name of a ``memory://<name>`` URL; ``None`` for any other scheme."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        return None
    name = parts.netloc + parts.path.rstrip("/")
    if not name:
        raise ValidationError("url", "expected memory://<broker name>")
    return name


# -- messages as the broker keeps and delivers them ------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One message the broker sends a client; QoS 1 ones are acked by ``packet_id``."""

    message: MqttMessage
    packet_id: int | None = None
    duplicate: bool = False


@dataclass(frozen=True)
class _Stored:
    """A published message with the absolute time it expires (``None``: never)."""

    message: MqttMessage
    expires_at: float | None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def copy_for(self, now: float, qos: int, retain: bool) -> MqttMessage:
        """The message as one subscriber receives it: its QoS, retain flag, remaining life."""
        remaining = None
        if self.expires_at is not None:
            remaining = math.ceil(self.expires_at - now)
        return dataclasses.replace(
            self.message, qos=qos, retain=retain, message_expiry_interval=remaining
        )


@dataclass(frozen=True)
class _Queued:
    stored: _Stored
    qos: int
    retain: bool


# -- sessions ----------------------------------------------------------------------------------


@dataclass(eq=False)
class _Session:
    """What the broker keeps for one client id, connected or not."""

    client_id: str
    expiry_interval: int = 0
    subscriptions: dict[str, int] = field(default_factory=dict)  # filter -> QoS
    shared: dict[tuple[str, str], int] = field(default_factory=dict)  # (group, filter) -> QoS
    queue: deque[_Queued] = field(default_factory=deque)
    in_flight: dict[int, Delivery] = field(default_factory=dict)  # packet id -> delivery
    resend: deque[Delivery] = field(default_factory=deque)
    connection: Connection | None = None
    expires_at: float | None = None  # set while disconnected
    overflowing: bool = False  # the queue is full and a drop was logged
    last_packet_id: int = 0

    def max_qos_for(self, topic: str) -> int | None:
        """The highest QoS of this session's non-shared filters matching ``topic``."""
        granted = [qos for flt, qos in self.subscriptions.items() if topic_matches(flt, topic)]
        return max(granted) if granted else None

    def attach(self, connection: Connection) -> None:
        """Start a connection: unacknowledged messages go out again first, marked duplicate."""
        self.connection = connection
        self.expires_at = None
        self.resend = deque(
            dataclasses.replace(delivery, duplicate=True) for delivery in self.in_flight.values()
        )

    def detach(self) -> None:
        """End the connection; QoS 0 messages are not kept for a disconnected client."""
        self.connection = None
        self.resend.clear()
        self.queue = deque(queued for queued in self.queue if queued.qos > 0)

    def next_delivery(self, now: float, window: int) -> Delivery | None:
        """The next message to send, or ``None`` when nothing is due or the window is full."""
        if self.resend:
            return self.resend.popleft()
        while self.queue:
            queued = self.queue[0]
            if queued.stored.expired(now):
                self.queue.popleft()
                continue
            if queued.qos > 0 and len(self.in_flight) >= window:
                return None
            self.queue.popleft()
            return self._deliver(queued, now)
        return None

    def _deliver(self, queued: _Queued, now: float) -> Delivery:
        message = queued.stored.copy_for(now, queued.qos, queued.retain)
        if queued.qos == 0:
            return Delivery(message)
        delivery = Delivery(message, self._free_packet_id())
        assert delivery.packet_id is not None
        self.in_flight[delivery.packet_id] = delivery
        return delivery

    def _free_packet_id(self) -> int:
        # The window (at most 65535) is checked before: a free id always exists.
        while True:
            self.last_packet_id = self.last_packet_id % _MAX_PACKET_ID + 1
            if self.last_packet_id not in self.in_flight:
                return self.last_packet_id

    def pending(self) -> int:
        """Messages not yet acknowledged: queued plus in flight."""
        return len(self.queue) + len(self.in_flight)


# -- connections -------------------------------------------------------------------------------


class Connection:
    """A client's connection to a ``Broker``: what a socket to mosquitto is for aiomqtt.

    Iterate it (or ``receive``) for deliveries, ``ack`` QoS 1 ones once handled. Closing it (or
    leaving ``async with``) keeps a persistent session at the broker.
    """

    def __init__(self, broker: Broker, session: _Session, *, window: int, present: bool) -> None:
        self._broker = broker
        self._session = session
        self._window = window
        self.session_present = present
        self.client_id = session.client_id
        self.closed_because: str | None = None
        self._wakeup = anyio.Event()

    @property
    def closed(self) -> bool:
        return self.closed_because is not None

    async def subscribe(self, filters: Sequence[tuple[str, int]]) -> list[int]:
        """Subscribe ``(filter, qos)`` pairs; returns the granted QoS of each."""
        self._check_open()
        granted = [self._broker._subscribe(self._session, flt, qos) for flt, qos in filters]
        await anyio.lowlevel.checkpoint()
        return granted

    async def unsubscribe(self, filters: Sequence[str]) -> None:
        self._check_open()
        for topic_filter in filters:
            self._broker._unsubscribe(self._session, topic_filter)
        await anyio.lowlevel.checkpoint()

    async def publish(self, message: MqttMessage) -> None:
        """Publish ``message``; returns once the broker took it (a QoS 1 PUBACK)."""
        self._check_open()
        self._broker._publish(message)
        await anyio.lowlevel.checkpoint()

    async def receive(self) -> Delivery:
        """The next delivery; waits while none is due (or the in-flight window is full)."""
        while True:
            await anyio.lowlevel.checkpoint()  # before taking one: a cancel then loses nothing
            self._check_open()
            delivery = self._session.next_delivery(self._broker.clock(), self._window)
            if delivery is not None:
                return delivery
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    def __aiter__(self) -> Connection:
        return self

    async def __anext__(self) -> Delivery:
        return await self.receive()

    def ack(self, packet_id: int) -> None:
        """Acknowledge a QoS 1 delivery (PUBACK). An ack on a closed connection is lost."""
        if self.closed:
            return
        if self._session.in_flight.pop(packet_id, None) is not None:
            self.wake()

    def close(self) -> None:
        """Disconnect; a persistent session stays at the broker until it expires."""
        if not self.closed:
            self._broker._disconnect(self, "closed by the client")

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- for the broker ---------------------------------------------------------------------

    def wake(self) -> None:
        """Something may be due: let a waiting ``receive`` look again."""
        self._wakeup.set()

    def mark_closed(self, reason: str) -> None:
        self.closed_because = reason
        self.wake()

    def _check_open(self) -> None:
        if self.closed_because is not None:
            raise ConnectionClosed(
                f"in-process connection {self.client_id!r}: {self.closed_because}"
            )


# -- the broker --------------------------------------------------------------------------------


class Broker:
    """Sessions, subscriptions, shared groups and retained messages of one in-process broker.

    Defaults follow mosquitto's: 20 messages in flight per client, 1000 queued.
    """

    def __init__(
        self,
        name: str = "",
        *,
        max_inflight_messages: int = 20,
        max_queued_messages: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name or f"broker-{uuid.uuid4().hex[:8]}"
        self.max_inflight_messages = max_inflight_messages
        self.max_queued_messages = max_queued_messages
        self.clock = clock
        self.dropped = 0
        self._sessions: dict[str, _Session] = {}
        self._groups: dict[tuple[str, str], deque[str]] = {}  # (group, filter) -> client ids
        self._retained: dict[str, _Stored] = {}

    def __repr__(self) -> str:
        return f"<in-process broker {self.name!r}: {len(self._sessions)} sessions>"

    # -- connecting ---------------------------------------------------------------------------

    def connect(
        self,
        client_id: str = "",
        *,
        clean_start: bool = True,
        session_expiry_interval: int = 0,
        receive_maximum: int = DEFAULT_RECEIVE_MAXIMUM,
    ) -> Connection:
        """Open a connection for ``client_id`` (empty: one is assigned), as an MQTT CONNECT.

        With ``clean_start`` off an existing session is resumed (``session_present``); a
        connection already using the client id is closed ("session taken over").
        """
        self._expire_sessions()
        client_id = client_id or f"auto-{uuid.uuid4().hex}"
        session = self._sessions.get(client_id)
        if session is not None and session.connection is not None:
            session.connection.mark_closed("session taken over")
            session.detach()
        if session is not None and clean_start:
            self._end_session(session)
            session = None
        present = session is not None
        if session is None:
            session = self._sessions[client_id] = _Session(client_id)
        session.expiry_interval = session_expiry_interval
        window = max(1, min(receive_maximum, self.max_inflight_messages or receive_maximum))
        connection = Connection(self, session, window=window, present=present)
        session.attach(connection)
        return connection

    def _disconnect(self, connection: Connection, reason: str) -> None:
        connection.mark_closed(reason)
        session = self._sessions.get(connection.client_id)
        if session is None or session.connection is not connection:
            return  # taken over or ended already
        session.detach()
        if session.expiry_interval == 0:
            self._end_session(session)
        elif session.expiry_interval != NEVER_EXPIRES:
            session.expires_at = self.clock() + session.expiry_interval

    def _expire_sessions(self) -> None:
        now = self.clock()
        for session in list(self._sessions.values()):
            if session.expires_at is not None and now >= session.expires_at:
                log.info("in-process broker %s: session %s expired", self.name, session.client_id)
                self._end_session(session)

    def _end_session(self, session: _Session) -> None:
        """Forget a session; its undelivered messages go with it (as in mosquitto)."""
        del self._sessions[session.client_id]
        for key in session.shared:
            self._leave_group(key, session.client_id)
        if session.shared and session.pending():
            log.warning(
                "in-process broker %s: session %s ended with %d shared-subscription messages "
                "undelivered",
                self.name,
                session.client_id,
                session.pending(),
            )

    def restart(self) -> None:
        """Close every connection, forget all state: a broker restart without persistence."""
        for session in self._sessions.values():
            if session.connection is not None:
                session.connection.mark_closed("broker restarted")
        self._sessions.clear()
        self._groups.clear()
        self._retained.clear()

    # -- subscriptions ------------------------------------------------------------------------

    def _subscribe(self, session: _Session, topic_filter: str, qos: int) -> int:
        granted = min(max(qos, 0), 1)
        shared = _split_shared(topic_filter)
        if shared is not None:
            members = self._groups.setdefault(shared, deque())
            if session.client_id not in members:
                members.append(session.client_id)
            session.shared[shared] = granted
            return granted
        session.subscriptions[topic_filter] = granted
        self._send_retained(session, topic_filter, granted)
        return granted

    def _unsubscribe(self, session: _Session, topic_filter: str) -> None:
        shared = _split_shared(topic_filter)
        if shared is None:
            session.subscriptions.pop(topic_filter, None)
        elif session.shared.pop(shared, None) is not None:
            self._leave_group(shared, session.client_id)

    def _leave_group(self, key: tuple[str, str], client_id: str) -> None:
        members = self._groups.get(key)
        if members is not None and client_id in members:
            members.remove(client_id)
            if not members:
                del self._groups[key]

    def _send_retained(self, session: _Session, topic_filter: str, qos: int) -> None:
        now = self.clock()
        for topic, stored in list(self._retained.items()):
            if stored.expired(now):
                del self._retained[topic]
            elif topic_matches(topic_filter, topic):
                self._enqueue(session, stored, min(stored.message.qos, qos), retain=True)

    # -- publishing ---------------------------------------------------------------------------

    def _publish(self, message: MqttMessage) -> None:
        _check_topic(message.topic)
        self._expire_sessions()
        message = dataclasses.replace(message, qos=min(max(message.qos, 0), 1))
        interval = message.message_expiry_interval
        expires_at = self.clock() + interval if interval else None
        stored = _Stored(message, expires_at)
        if message.retain:
            self._retain(stored)
        self._route(stored)

    def _retain(self, stored: _Stored) -> None:
        """Keep the last retained message per topic; a zero-byte one deletes it."""
        if stored.message.payload:
            self._retained[stored.message.topic] = stored
        else:
            self._retained.pop(stored.message.topic, None)

    def _route(self, stored: _Stored) -> None:
        topic, qos = stored.message.topic, stored.message.qos
        for session in self._sessions.values():
            granted = session.max_qos_for(topic)
            if granted is not None:
                self._enqueue(session, stored, min(qos, granted), retain=False)
        for key, members in self._groups.items():
            if topic_matches(key[1], topic):
                session = self._sessions[members[0]]
                members.rotate(-1)  # round robin over members, connected or not (mosquitto)
                self._enqueue(session, stored, min(qos, session.shared[key]), retain=False)

    def _enqueue(self, session: _Session, stored: _Stored, qos: int, *, retain: bool) -> None:
        if qos == 0 and session.connection is None:
            return  # QoS 0 is not kept for a disconnected client
        if len(session.queue) >= self.max_queued_messages:
            self._drop(session, stored)
            return
        session.overflowing = False
        session.queue.append(_Queued(stored, qos, retain))
        if session.connection is not None:
            session.connection.wake()

    def _drop(self, session: _Session, stored: _Stored) -> None:
        self.dropped += 1
        if not session.overflowing:  # one warning per overflow, not one per message
            session.overflowing = True
            log.warning(
                "in-process broker %s: queue of %s is full (%d messages); dropping messages "
                "such as one on %s",
                self.name,
                session.client_id,
                self.max_queued_messages,
                stored.message.topic,
            )

    # -- inspection (tests, demo) ---------------------------------------------------------------

    def has_session(self, client_id: str) -> bool:
        self._expire_sessions()
        return client_id in self._sessions

    def pending(self, client_id: str) -> int:
        """Messages the broker holds for ``client_id``: queued plus unacknowledged."""
        session = self._sessions.get(client_id)
        return session.pending() if session is not None else 0

    def retained_topics(self) -> list[str]:
        now = self.clock()
        return sorted(topic for topic, stored in self._retained.items() if not stored.expired(now))


# -- topic names and filters -------------------------------------------------------------------


def _check_topic(topic: str) -> None:
    if not topic or "+" in topic or "#" in topic or "\0" in topic:
        raise ValidationError(
            "topic", f"{topic[:80]!r} is not a topic name (non-empty, no wildcards)"
        )


def _check_filter(topic_filter: str) -> None:
    """``+`` and ``#`` stand alone in their level, ``#`` only as the last level."""
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        wildcard_alone = level in ("+", "#") or ("+" not in level and "#" not in level)
        hash_last = level != "#" or index == len(levels) - 1
        if not (topic_filter and wildcard_alone and hash_last and "\0" not in level):
            raise ValidationError("topic filter", f"{topic_filter[:80]!r} is not valid")


def _split_shared(topic_filter: str) -> tuple[str, str] | None:
    """``(group, filter)`` of a ``$share/{group}/{filter}`` filter, ``None`` for others."""
    if not topic_filter.startswith(_SHARE_PREFIX):
        _check_filter(topic_filter)
        return None
    group, _, inner = topic_filter[len(_SHARE_PREFIX) :].partition("/")
    if not group or "+" in group or "#" in group or not inner:
        raise ValidationError("topic filter", f"{topic_filter[:80]!r} is not a valid share")
    _check_filter(inner)
    return group, inner
