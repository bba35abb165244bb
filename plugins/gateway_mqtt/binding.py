"""The MQTT v5 binding: serves processors over a broker, sends commands and awaits replies.

Delivery guarantees, and why the code looks the way it does:

- Sessions are persistent (clean start off, session expiry) and subscriptions are QoS 1, so
  commands published while this instance is down wait for it at the broker.
- Messages are acknowledged (PUBACK) only after their handler finished and the replies were sent
  (paho's manual ack). A crash mid-message therefore means redelivery, never loss; the store's
  de-duplication turns the redelivery into a replay of the stored replies.
- A handler that failed transiently (``gateway.resilience.is_transient``: the store away, a
  timeout) is tried again, with backoff, until it succeeds: the message is neither answered with
  an error nor acknowledged meanwhile. If the instance stops first, it stays unacknowledged and
  the broker hands it out again. QoS 0 messages (heartbeats) are not retried: nobody asked for
  their delivery, and the next one says the same. A permanently bad message gets its error
  reply and is acknowledged.
- Each message is handled in its own task, so a handler awaiting a PUBACK never holds up the
  read loop; a semaphore bounds how many run at once.
- Each lane (``gateway.transport.Subscription.lane``) has a connection and session of its own
  (client id ``<client id>-<lane>``) with its own handler budget and Receive Maximum: the MES's
  calls (``MES_LANE``) are not queued behind a flood of equipment replies the engine works
  through. The main lane carries everything else, this instance's reply topic and what the
  gateway publishes.
- Every socket has TCP_NODELAY: with Nagle's algorithm a QoS 1 round trip costs 40-80 ms.

The broker is reached through ``gateway_mqtt.client``: aiomqtt for ``mqtt://``/``mqtts://``, the
in-process broker (``gateway_mqtt.memory``) for ``memory://<name>``, with the same behaviour.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, correlation_of, from_mqtt, to_mqtt
from gateway.core import ALL_ROLES
from gateway.errors import CloudEventError, ConnectionFailed, GatewayError
from gateway.peers import LogOnce
from gateway.resilience import TransientError, is_transient
from gateway.topics import reply_topic
from gateway.transport import INVALID_REQUEST, MQTT_BINDING, error_event, reply_allowed
from gateway_mqtt.adoption import SessionAdopter, wait_quiet
from gateway_mqtt.client import (
    ConnectionLost,
    Connector,
    MqttClient,
    PublishRefused,
    Received,
    connector_for,
)
from gateway_mqtt.refusals import RefusedPublishes
from gateway_mqtt.settings import MqttSettings, session_client_id

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)


# A connection that ends this soon after it was made, KICKS times within KICKS_WITHIN_SECONDS:
# the session is being taken over by another client with the same client id.
SHORT_LIFE_SECONDS = 5.0
KICKS = 3
KICKS_WITHIN_SECONDS = 30.0

# Leaving a share group: how long no message must arrive before the connection closes.
DRAIN_QUIET_SECONDS = 0.2


@dataclass
class Lane:
    """One connection of the binding: its session, its handler budget, what it subscribed."""

    name: str  # "": the main lane
    client_id: str
    connector: Connector
    slots: anyio.Semaphore
    subscribed: list[str] = dataclasses.field(default_factory=list)

    @property
    def main(self) -> bool:
        return not self.name


@dataclass
class BrokerOutage:
    """Says again, every ``report_seconds`` while the broker cannot be reached, that it cannot
    (the outage's first failure and its end are logged once by ``gateway.resilience``); the
    retries in between only at DEBUG."""

    where: str
    report_seconds: float
    since: float | None = None
    reported: float = 0.0

    def failed(self, error: Exception, retry_in: float, *, started: bool) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = self.reported = now
            return
        if now - self.reported < self.report_seconds:
            log.debug("MQTT broker %s: %s; retrying in %.1f s", self.where, error, retry_in)
            return
        self.reported = now
        consequence = (
            "no commands are received or sent until it answers"
            if started
            else "the gateway starts once it answers"
        )
        log.warning(
            "MQTT broker %s still unreachable for %.0f s (%s): %s; check mqtt.url and that "
            "the broker runs",
            self.where,
            now - self.since,
            error,
            consequence,
        )

    def ended(self) -> None:
        self.since = None


class MqttBinding:
    name = MQTT_BINDING

    def __init__(self, settings: MqttSettings, *, instance_id: str, source: str) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self.client_id = session_client_id(settings, instance_id)
        self.connector: Connector = connector_for(settings, self.client_id)
        self.source = source
        self.reply_topic = reply_topic(settings.reply_topic_prefix, instance_id)
        user = settings.username or unquote(urlsplit(settings.url).username or "")
        self.refused = RefusedPublishes(user)  # counted once running (the gateway's metrics)
        self.share_name = settings.share_group  # with the store's identity once running
        self._client: MqttClient | None = None
        self._pending: dict[str, MemoryObjectSendStream[CloudEvent]] = {}
        self._closed = False
        self.received = 0  # messages taken from the broker (for draining and metrics)
        self._refused_replies = LogOnce(log)  # Response Topics refused, by the sender's topic
        self._takeovers = LogOnce(log, level=logging.ERROR, interval_seconds=300)
        self.reconnects = 0

    def _prepare(self) -> None:
        # anyio primitives belong to the event loop, which does not exist yet in __init__.
        self._connected = anyio.Event()

    def lane(self, name: str, client_id: str | None = None) -> Lane:
        """This instance's lane ``name``; with ``client_id``: a gone instance's, to adopt."""
        if client_id is None and not name:
            client_id, connector = self.client_id, self.connector
        else:
            client_id = client_id or session_client_id(self.settings, self.instance_id, name)
            connector = connector_for(self.settings, client_id)
        slots = anyio.Semaphore(self.settings.max_concurrent_handlers)
        return Lane(name, client_id, connector, slots)

    @property
    def ready(self) -> bool:
        return self._client is not None

    # -- serving ---------------------------------------------------------------------------

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self._prepare()
        self._closed = False
        self.share_name = await self._share_name(gateway)
        self.refused.counter = gateway.metrics.counter(
            "mqtt_publishes_refused_total",
            "Publishes the broker refused (PUBACK reason code), by kind (reply, publish)",
            ["kind", "reason"],
        )
        names = {
            subscription.lane
            for processor in gateway.dispatcher.processors_for(self.name)
            for subscription in processor.subscriptions
        }
        async with anyio.create_task_group() as lanes:
            # Every lane subscribed before the gateway counts as started: a command sent to a
            # lane not subscribed yet would reach no session of a new share group.
            for name in sorted(names - {""}):
                await lanes.start(self._run_lane, gateway, self.lane(name))
            if self.adopts(gateway) and gateway.instances is not None:
                lanes.start_soon(SessionAdopter(self, gateway.instances).run, gateway)
            await self._run_lane(gateway, self.lane(""), task_status=task_status)
        self._closed = True
        log.info("MQTT binding stopped; session %s kept by the broker", self.client_id)

    async def _run_lane(
        self,
        gateway: Gateway,
        lane: Lane,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect and serve ``lane`` until the gateway stops, reconnecting when the connection
        drops; ``task_status`` hears once it first connected and subscribed."""
        reconnects = gateway.metrics.counter(
            "transport_reconnects_total", "Connections lost or refused, then retried", ["binding"]
        ).labels(self.name)
        taken_over = gateway.metrics.counter(
            "mqtt_sessions_taken_over_total",
            "Connections the broker closed because another client took the session over",
        )
        delay = self.settings.reconnect_min_seconds
        started = False
        # Logged once per outage (and its end once); /readyz shows "binding mqtt" meanwhile.
        check = f"mqtt.connection.{lane.name}" if lane.name else "mqtt.connection"
        outage = gateway.resilience.outage(check, logger=log)
        # ... and said again at an interval while it lasts, for whoever reads the log later.
        unreachable = BrokerOutage(lane.connector.where, self.settings.unreachable_report_seconds)

        def stop_event() -> anyio.Event:
            # Until the first connection, a stop request ends the retrying; after it, the
            # binding stays up until the services have finished (``closing``).
            return gateway.closing if started else gateway.stopping

        # When the last connections each ended soon after they were made, while the broker
        # answers every time: another client is taking the session over (not every broker
        # says so with reason code 0x8E, mosquitto 2.0 does not).
        short_lives: deque[float] = deque(maxlen=KICKS)
        while not stop_event().is_set():
            connected_at: float | None = None
            try:
                async with lane.connector.connect() as client:
                    connected_at = time.monotonic()
                    await self._subscribe(client, gateway, lane)
                    log.info("MQTT connected to %s as %s", lane.connector.where, lane.client_id)
                    outage.succeeded()
                    unreachable.ended()
                    if lane.main:
                        self._client = client
                        self._connected.set()
                        gateway.plugins.hook.gateway_transport_connected(
                            binding=self.name,
                            session_present=client.session_present,
                            reconnect=started,
                        )
                    if not started:
                        started = True
                        task_status.started()
                    delay = self.settings.reconnect_min_seconds
                    await self._serve(client, gateway, lane)
            except ConnectionLost as error:
                if lane.main:
                    self._disconnected()
                if not started and error.refused_for_good:
                    credentials = any(s in str(error) for s in ("user name", "authorized"))
                    raise ConnectionFailed(
                        "mqtt.password" if credentials else "mqtt.url",
                        f"MQTT broker {lane.connector.where} refused "
                        f"client {lane.client_id!r}: {error}",
                    ) from None
                self.reconnects += 1
                reconnects.inc()
                now = time.monotonic()
                if connected_at is not None and now - connected_at < SHORT_LIFE_SECONDS:
                    short_lives.append(now)
                kicked = len(short_lives) == KICKS and now - short_lives[0] < KICKS_WITHIN_SECONDS
                if error.taken_over or kicked:
                    # Another client holds this session (a second gateway with the same
                    # instance id, or someone using the gateway's client id): reconnecting at
                    # once would kick it off and be kicked off in turn, commands handled by
                    # neither. Say so loudly and come back only slowly.
                    taken_over.inc()
                    self._takeovers.report(
                        lane.client_id,
                        "MQTT session %s on %s TAKEN OVER: another client connected with this "
                        "gateway's client id (reason code 0x8E, or dropped %d times within %.0f "
                        "s while the broker answers). Two gateways may share an "
                        "instance id or mqtt.client_id, or a login may use the gateway's client "
                        "id: the broker must bind client ids to users (deploy/mosquitto). "
                        "Reconnecting only every %.0f s meanwhile",
                        lane.client_id,
                        lane.connector.where,
                        KICKS,
                        KICKS_WITHIN_SECONDS,
                        self.settings.reconnect_max_seconds,
                    )
                    delay = self.settings.reconnect_max_seconds
                what = "the gateway starts once it answers" if not started else "no commands flow"
                outage.failed(
                    TransientError(
                        f"MQTT broker {lane.connector.where} unreachable ({error}): {what}; "
                        f"check mqtt.url (from {gateway.settings.origin('mqtt.url')}) and "
                        "that the broker runs"
                    )
                )
                unreachable.failed(error, delay, started=started)
                with anyio.move_on_after(delay):
                    await stop_event().wait()
                delay = min(delay * 2 or 0.1, self.settings.reconnect_max_seconds)
            else:
                if lane.main:
                    self._disconnected()
        outage.close()
        if not started and not lane.main:
            task_status.started()  # stopped before it ever connected: the main lane says so

    def _disconnected(self) -> None:
        self._client = None
        if self._connected.is_set():
            self._connected = anyio.Event()

    async def _subscribe(self, client: MqttClient, gateway: Gateway, lane: Lane) -> None:
        """(Re)subscribe the lane's processor topics (the main lane: and this instance's reply
        topic)."""
        filters = {self.reply_topic: 1} if lane.main else {}
        for processor in gateway.dispatcher.processors_for(self.name):
            for subscription in processor.subscriptions:
                if subscription.lane != lane.name:
                    continue
                topic = subscription.topic
                if subscription.shared:
                    topic = f"$share/{self.share_name}/{topic}"
                filters[topic] = max(filters.get(topic, 0), subscription.qos)
        if filters:
            await client.subscribe(filters)
        lane.subscribed = list(filters)
        log.info("MQTT subscribed: %s", ", ".join(filters))

    async def _serve(self, client: MqttClient, gateway: Gateway, lane: Lane) -> None:
        """Read messages until the gateway stops or the connection drops."""
        lost: ConnectionLost | None = None
        # Leaving the block cancels the reader first, then waits for handlers in flight.
        async with anyio.create_task_group() as handlers, anyio.create_task_group() as reading:

            async def read() -> None:
                nonlocal lost
                try:
                    await self._read(client, gateway, handlers, lane)
                except ConnectionLost as error:
                    lost = error
                reading.cancel_scope.cancel()

            reading.start_soon(read)
            await gateway.closing.wait()
            if lost is None:
                if await self._others_take_over(gateway):
                    await self._leave_share_group(client, lane)
                else:
                    self._session_kept(lane)
            reading.cancel_scope.cancel()
        if lost is not None:
            raise lost

    def _session_kept(self, lane: Lane) -> None:
        shared = [topic for topic in lane.subscribed if topic.startswith("$share/")]
        if not shared:
            return
        log.info(
            "kept the MQTT session %s in share group %s (the broker keeps it %d s after the "
            "disconnect): no other live instance on this store serves the group, so commands "
            "sent meanwhile wait for this instance to come back. If it will not, remove the "
            "session (README: Operating it, stale sessions)",
            lane.client_id,
            self.share_name,
            self.settings.session_expiry_seconds,
        )

    async def _share_name(self, gateway: Gateway) -> str:
        """The share group on the broker: ``mqtt.share_group``, then the store's identity.

        Instances on different stores must never split one group's commands: one that stopped
        and kept its session (it saw no other instance in its own store) would take every
        other command until its session expires, and the live ones cannot adopt it. With the
        store in the name, each store's instances form a group of their own.
        """
        if gateway.instances is None:
            return self.settings.share_group
        return f"{self.settings.share_group}.{await gateway.instances.store_id()}"

    async def _others_take_over(self, gateway: Gateway) -> bool:
        """Whether another live instance serves the share group after this one stops."""
        if gateway.instances is None:
            return False
        try:
            return await gateway.instances.others_alive()
        except Exception as error:  # without the store, keep the session (the safe side)
            log.warning("cannot tell whether other instances are alive: %s", error)
            return False

    async def _leave_share_group(self, client: MqttClient, lane: Lane) -> None:
        """Unsubscribe the shared topics, then take what the broker had already sent.

        The broker hands a shared subscription's messages to every member session in turn,
        even to a disconnected one, which keeps them until it comes back. An instance that
        stops while others run leaves the group, so no command waits for it in vain.
        """
        shared = [topic for topic in lane.subscribed if topic.startswith("$share/")]
        if not shared:
            return
        await client.unsubscribe(shared)
        log.info("left the share group %s: other instances take the commands", self.share_name)
        await wait_quiet(lambda: self.received, DRAIN_QUIET_SECONDS)

    def adopts(self, gateway: Gateway) -> bool:
        """Whether this instance takes over the sessions of gone ones (``gateway_mqtt.adoption``):
        another instance's client ids are known only when they follow the default pattern, and
        an instance of one role (a simulator, a publisher) does not serve every topic."""
        return (
            self.settings.adopt_gone_instances
            and not self.settings.client_id
            and gateway.role == ALL_ROLES
        )

    def served_filters(self, gateway: Gateway) -> set[tuple[str, str]]:
        """(lane, topic filter) of every subscription this instance's processors have."""
        return {
            (
                subscription.lane,
                f"$share/{self.share_name}/{subscription.topic}"
                if subscription.shared
                else subscription.topic,
            )
            for processor in gateway.dispatcher.processors_for(self.name)
            for subscription in processor.subscriptions
        }

    async def _read(
        self, client: MqttClient, gateway: Gateway, handlers: TaskGroup, lane: Lane
    ) -> None:
        async for received in client.messages():
            self.received += 1
            try:  # a free slot: taken without a turn of the event loop (anyio's acquire yields)
                lane.slots.acquire_nowait()
            except anyio.WouldBlock:
                await lane.slots.acquire()
            handlers.start_soon(self.handle, client, gateway, received, lane)

    async def handle(
        self, client: MqttClient, gateway: Gateway, received: Received, lane: Lane
    ) -> None:
        """Handle one message taken on ``lane`` (holding one of its slots): acknowledged once
        handled, or left unacknowledged for the broker to hand out again."""
        incoming = received.message
        try:
            if incoming.topic == self.reply_topic:
                self._deliver_reply(incoming)
            else:
                for reply in await self._process_durably(gateway, incoming):
                    await self._send_reply(client, gateway, incoming, reply)
        except PublishRefused as error:  # handled: acknowledged, the refusal said once per topic
            self.refused.note("reply", error.topic, error.reason, incoming.topic)
        except ConnectionLost as error:
            log.warning(
                "reply to %s not sent (%s); the broker redelivers the message",
                incoming.topic,
                error,
            )
            return  # no ack on a dead connection: the broker redelivers it
        except Exception as error:
            if is_transient(error):
                log.warning(
                    "message on %s not handled before stopping (%s); not acknowledged, so the "
                    "broker hands it out again",
                    incoming.topic,
                    error,
                )
                return
            log.exception("unexpected failure handling a message on %s", incoming.topic)
        finally:
            lane.slots.release()
        received.ack()

    async def _process_durably(self, gateway: Gateway, incoming: MqttMessage) -> list[CloudEvent]:
        """``_process``, tried again while it fails transiently (QoS 0: once)."""
        if incoming.qos == 0:
            try:
                return await self._process(gateway, incoming)
            except Exception as error:
                if not is_transient(error):
                    raise
                log.debug("QoS 0 message on %s dropped: %s", incoming.topic, error)
                return []
        return await gateway.resilience.retry(
            "mqtt.handlers",
            lambda: self._process(gateway, incoming),
            stop=gateway.closing,
            logger=log,
        )

    async def _process(self, gateway: Gateway, incoming: MqttMessage) -> list[CloudEvent]:
        dispatcher = gateway.dispatcher
        try:
            if len(incoming.payload) > self.settings.max_payload_bytes:
                raise CloudEventError(
                    "data",
                    f"payload of {len(incoming.payload)} bytes exceeds the limit of "
                    f"{self.settings.max_payload_bytes}",
                )
            event = from_mqtt(incoming)
        except CloudEventError as error:
            dispatcher.reject(
                binding=self.name, topic=incoming.topic, code=INVALID_REQUEST, error=error
            )
            if incoming.response_topic is None:
                return []
            salvaged = dict(
                pair
                for pair in incoming.user_properties
                if isinstance(pair, tuple) and len(pair) == 2
            )
            return [
                error_event(
                    source=self.source,
                    code=INVALID_REQUEST,
                    message=str(error),
                    request_type=salvaged.get("type"),
                    subject=salvaged.get("subject"),
                )
            ]
        return await dispatcher.dispatch(event, binding=self.name, topic=incoming.topic)

    async def _send_reply(
        self, client: MqttClient, gateway: Gateway, request: MqttMessage, reply: CloudEvent
    ) -> None:
        if request.response_topic is None:
            log.debug("no Response Topic on %s: reply %s not sent", request.topic, reply.type)
            return
        subscriptions = [
            subscription
            for processor in gateway.dispatcher.processors_for(self.name)
            for subscription in processor.subscriptions
        ]
        if not reply_allowed(subscriptions, request.topic, request.response_topic):
            gateway.metrics.counter(
                "mqtt_replies_dropped_total",
                "Replies not sent: the Response Topic is not where replies to that topic may go",
            ).inc()
            self._refused_replies.report(
                request.topic,
                "reply to a message on %s not sent: its Response Topic %r is not where replies "
                "to that topic may go",
                request.topic,
                request.response_topic[:200],
            )
            return
        outgoing = to_mqtt(reply, request.response_topic)
        # Echo the request's Correlation Data byte for byte, as MQTT request/response expects.
        outgoing = dataclasses.replace(outgoing, correlation_data=correlation_of(request))
        await client.publish(outgoing)

    # -- sending ---------------------------------------------------------------------------

    async def _connected_client(self, timeout: float = 10.0) -> MqttClient:
        if self._closed:
            raise GatewayError("the MQTT binding is stopped")
        connected = self._client
        if connected is not None:  # no cancel scope then: every publish asks
            return connected
        with anyio.move_on_after(timeout):
            while self._client is None:
                await self._connected.wait()
        if self._client is None:
            raise TransientError(f"MQTT not connected to {self.connector.where}")
        return self._client

    async def publish(
        self,
        topic: str,
        event: CloudEvent,
        *,
        retain: bool = False,
        qos: int = 1,
        response_topic: str | None = None,
    ) -> None:
        """Send one event; ``response_topic`` asks the receiver to reply there (MQTT v5).

        A command whose reply any instance may handle (the equipment drivers' shared reply
        topic) is sent this way rather than through ``request``, which waits on this instance.

        Correlation Data goes only on requests (a ``response_topic`` is given), as MQTT v5
        intends: a receiver that matches replies on Correlation Data must not take an event
        that merely names its cause (``correlationid`` stays a user property) for a reply.
        """
        client = await self._connected_client()
        message = to_mqtt(event, topic, retain=retain, qos=qos, response_topic=response_topic)
        if response_topic is None:
            message = dataclasses.replace(message, correlation_data=None)
        try:
            await client.publish(message)
        except PublishRefused as error:
            # Sending it again would be refused again: said (once per topic) and counted, and
            # the caller goes on as after any publish the broker took.
            self.refused.note("publish", error.topic, error.reason)

    async def request(self, topic: str, event: CloudEvent, *, timeout: float) -> CloudEvent:
        """Send ``event`` with this instance's reply topic and wait for the matching reply."""
        if not event.correlationid:
            event = event.replace(correlationid=event.id)
        correlation = event.correlationid
        assert correlation is not None
        send, receive = anyio.create_memory_object_stream[CloudEvent](1)
        self._pending[correlation] = send
        try:
            client = await self._connected_client()
            await client.publish(to_mqtt(event, topic, response_topic=self.reply_topic))
            with anyio.fail_after(timeout):
                return await receive.receive()
        except TimeoutError:
            raise GatewayError(f"no reply to {event.type} on {topic} within {timeout} s") from None
        finally:
            del self._pending[correlation]
            send.close()
            receive.close()

    def _deliver_reply(self, incoming: MqttMessage) -> None:
        try:
            reply = from_mqtt(incoming)
        except CloudEventError as error:
            log.warning("malformed reply on %s dropped: %s", incoming.topic, error)
            return
        waiting = self._pending.get(reply.correlationid or "")
        if waiting is None:
            log.info(
                "reply %s (correlation %s) arrived after its request gave up",
                reply.type,
                reply.correlationid,
            )
            return
        try:
            waiting.send_nowait(reply)
        except anyio.WouldBlock:
            log.info("second reply for correlation %s ignored", reply.correlationid)
