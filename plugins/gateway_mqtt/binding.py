"""The MQTT v5 binding: serves processors over a broker, sends commands and awaits replies.

Delivery guarantees, and why the code looks the way it does:

- Sessions are persistent (clean start off, session expiry) and subscriptions are QoS 1, so
  commands published while this instance is down wait for it at the broker.
- Messages are acknowledged (PUBACK) only after their handler finished and the replies were sent
  (paho's manual ack). A crash mid-message therefore means redelivery, never loss; the store's
  de-duplication turns the redelivery into a replay of the stored replies.
- Each message is handled in its own task, so a handler awaiting a PUBACK never holds up the
  read loop; a semaphore bounds how many run at once.
- Every socket has TCP_NODELAY: with Nagle's algorithm a QoS 1 round trip costs 40-80 ms.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import ssl
from typing import TYPE_CHECKING

import aiomqtt
import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import (
    MqttMessage,
    correlation_of,
    from_client_message,
    from_mqtt,
    publish,
    to_mqtt,
)
from gateway.errors import CloudEventError, GatewayError
from gateway.transport import INVALID_REQUEST, error_event
from gateway_mqtt.settings import BrokerAddress, MqttSettings, broker_address

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
# CONNACK reason codes that no amount of retrying will fix.
_REFUSED_FOR_GOOD = {"Bad user name or password", "Not authorized", "Client identifier not valid"}


class MqttBinding:
    name = "mqtt"

    def __init__(self, settings: MqttSettings, *, instance_id: str, source: str) -> None:
        self.settings = settings
        self.address: BrokerAddress = broker_address(settings)
        self.instance_id = instance_id
        self.client_id = settings.client_id or f"gw-{instance_id}"
        self.source = source
        self.reply_topic = f"{settings.reply_topic_prefix}/{instance_id}"
        self._client: aiomqtt.Client | None = None
        self._pending: dict[str, MemoryObjectSendStream[CloudEvent]] = {}
        self._closed = False
        self.reconnects = 0

    def _prepare(self) -> None:
        # anyio primitives belong to the event loop, which does not exist yet in __init__.
        self._connected = anyio.Event()
        self._handler_slots = anyio.Semaphore(self.settings.max_concurrent_handlers)

    # -- serving ---------------------------------------------------------------------------

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self._prepare()
        self._closed = False
        delay = self.settings.reconnect_min_seconds
        started = False
        while not gateway.closing.is_set():
            try:
                async with self._client_for_session() as client:
                    await self._subscribe(client, gateway)
                    self._client = client
                    self._connected.set()
                    log.info(
                        "MQTT connected to %s:%d as %s",
                        self.address.host,
                        self.address.port,
                        self.client_id,
                    )
                    if not started:
                        started = True
                        task_status.started()
                    delay = self.settings.reconnect_min_seconds
                    await self._serve(client, gateway)
            except aiomqtt.MqttError as error:
                self._disconnected()
                if not started and _refused_for_good(error):
                    raise GatewayError(
                        f"MQTT broker {self.address.host}:{self.address.port} refused "
                        f"client {self.client_id!r}: {error}"
                    ) from None
                self.reconnects += 1
                log.warning(
                    "MQTT connection to %s:%d lost or refused (%s); retrying in %.1f s",
                    self.address.host,
                    self.address.port,
                    error,
                    delay,
                )
                with anyio.move_on_after(delay):
                    await gateway.closing.wait()
                delay = min(delay * 2 or 0.1, self.settings.reconnect_max_seconds)
            else:
                self._disconnected()
        self._closed = True
        log.info("MQTT binding stopped; session %s kept by the broker", self.client_id)

    def _disconnected(self) -> None:
        self._client = None
        if self._connected.is_set():
            self._connected = anyio.Event()

    def _client_for_session(self) -> aiomqtt.Client:
        connect_properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        connect_properties.SessionExpiryInterval = self.settings.session_expiry_seconds
        client = aiomqtt.Client(
            self.address.host,
            self.address.port,
            identifier=self.client_id,
            username=self.address.username,
            password=self.address.password,
            protocol=aiomqtt.ProtocolVersion.V5,
            clean_start=False,
            properties=connect_properties,
            keepalive=self.settings.keepalive_seconds,
            tls_context=self._tls_context(),
            socket_options=[NODELAY],
        )
        # aiomqtt does not expose manual acknowledgement; paho (its engine) does. We ack
        # after handling so an unprocessed message is redelivered instead of lost.
        client._client.manual_ack_set(True)
        # Many handlers publish at once by design; aiomqtt would warn from 10 pending calls on.
        client.pending_calls_threshold = 10 * self.settings.max_concurrent_handlers
        return client

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self.address.tls:
            return None
        context = ssl.create_default_context(cafile=self.settings.tls_ca_file or None)
        if self.settings.tls_cert_file:
            context.load_cert_chain(self.settings.tls_cert_file, self.settings.tls_key_file or None)
        if not self.settings.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    async def _subscribe(self, client: aiomqtt.Client, gateway: Gateway) -> None:
        """(Re)subscribe every processor's topics and this instance's reply topic."""
        filters = {self.reply_topic: 1}
        for processor in gateway.dispatcher.processors_for(self.name):
            for subscription in processor.subscriptions:
                topic = subscription.topic
                if subscription.shared:
                    topic = f"$share/{self.settings.share_group}/{topic}"
                filters[topic] = max(filters.get(topic, 0), subscription.qos)
        await client.subscribe(list(filters.items()))
        log.info("MQTT subscribed: %s", ", ".join(filters))

    async def _serve(self, client: aiomqtt.Client, gateway: Gateway) -> None:
        """Read messages until the gateway stops or the connection drops."""
        lost: aiomqtt.MqttError | None = None
        # Leaving the block cancels the reader first, then waits for handlers in flight.
        async with anyio.create_task_group() as handlers, anyio.create_task_group() as reading:

            async def read() -> None:
                nonlocal lost
                try:
                    await self._read(client, gateway, handlers)
                except aiomqtt.MqttError as error:
                    lost = error
                reading.cancel_scope.cancel()

            reading.start_soon(read)
            await gateway.closing.wait()
            reading.cancel_scope.cancel()
        if lost is not None:
            raise lost

    async def _read(self, client: aiomqtt.Client, gateway: Gateway, handlers: TaskGroup) -> None:
        async for message in client.messages:
            await self._handler_slots.acquire()
            handlers.start_soon(self._handle, client, gateway, message)

    async def _handle(
        self, client: aiomqtt.Client, gateway: Gateway, message: aiomqtt.Message
    ) -> None:
        try:
            incoming = from_client_message(message)
            if incoming.topic == self.reply_topic:
                self._deliver_reply(incoming)
            else:
                for reply in await self._process(gateway, incoming):
                    await self._send_reply(client, incoming, reply)
        except aiomqtt.MqttError as error:
            log.warning(
                "reply to %s not sent (%s); the broker redelivers the message",
                message.topic.value,
                error,
            )
            return  # no ack on a dead connection: the broker redelivers it
        except Exception:
            log.exception("unexpected failure handling a message on %s", message.topic.value)
        finally:
            self._handler_slots.release()
        client._client.ack(message.mid, message.qos)

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
        self, client: aiomqtt.Client, request: MqttMessage, reply: CloudEvent
    ) -> None:
        if request.response_topic is None:
            log.debug("no Response Topic on %s: reply %s not sent", request.topic, reply.type)
            return
        outgoing = to_mqtt(reply, request.response_topic)
        # Echo the request's Correlation Data byte for byte, as MQTT request/response expects.
        outgoing = dataclasses.replace(outgoing, correlation_data=correlation_of(request))
        await publish(client, outgoing)

    # -- sending ---------------------------------------------------------------------------

    async def _connected_client(self, timeout: float = 10.0) -> aiomqtt.Client:
        if self._closed:
            raise GatewayError("the MQTT binding is stopped")
        with anyio.move_on_after(timeout):
            while self._client is None:
                await self._connected.wait()
        if self._client is None:
            raise GatewayError(f"MQTT not connected to {self.address.host}:{self.address.port}")
        return self._client

    async def publish(
        self, topic: str, event: CloudEvent, *, retain: bool = False, qos: int = 1
    ) -> None:
        client = await self._connected_client()
        await publish(client, to_mqtt(event, topic, retain=retain, qos=qos))

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
            await publish(client, to_mqtt(event, topic, response_topic=self.reply_topic))
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


def _refused_for_good(error: aiomqtt.MqttError) -> bool:
    return isinstance(error, aiomqtt.MqttCodeError) and str(error.rc) in _REFUSED_FOR_GOOD
