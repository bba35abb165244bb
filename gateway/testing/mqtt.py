"""An MQTT v5 client playing the MES (or equipment) side in tests and integration checks.

It speaks only MQTT: it sends CloudEvents (or raw, deliberately malformed messages) with its own
Response Topic and waits for the reply carrying the same Correlation Data. ``connect_test_client``
connects it to a real broker (``mqtt://host:port``); the MQTT plugin's in-process broker
(``memory://<name>``) has its own ``gateway_mqtt.testing.connect_test_client`` with the same API,
built on ``open_test_client`` and any ``TestConnection``.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol
from urllib.parse import urlsplit

import aiomqtt
import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_client_message, from_mqtt, publish, to_mqtt
from gateway.transport import topic_matches

_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class TestConnection(Protocol):
    """What the test client needs of a broker connection (acknowledging is automatic)."""

    async def subscribe(self, topic_filter: str) -> None: ...

    async def publish(self, message: MqttMessage) -> None: ...

    def messages(self) -> AsyncIterator[MqttMessage]: ...


class MqttTestClient:
    """Use through ``connect_test_client``; every reply topic and client id is unique."""

    def __init__(self, connection: TestConnection, client_id: str) -> None:
        self._connection = connection
        self.client_id = client_id
        self.reply_topic = f"test-replies/{client_id}"
        self._pending: dict[bytes, ObjectSendStream[MqttMessage]] = {}
        self._watchers: list[tuple[str, ObjectSendStream[MqttMessage]]] = []

    async def _route(self) -> None:
        async for incoming in self._connection.messages():
            if incoming.topic == self.reply_topic and incoming.correlation_data in self._pending:
                await self._pending[incoming.correlation_data].send(incoming)
                continue
            for topic_filter, stream in self._watchers:
                if topic_matches(topic_filter, incoming.topic):
                    await stream.send(incoming)

    async def publish(self, message: MqttMessage) -> None:
        await self._connection.publish(message)

    async def send(self, topic: str, event: CloudEvent) -> None:
        await self.publish(to_mqtt(event, topic))

    async def request_raw(
        self,
        message: MqttMessage,
        *,
        timeout: float = 5.0,
        published: anyio.Event | None = None,
    ) -> MqttMessage:
        """Publish ``message`` (its Correlation Data set here) and return the raw reply.

        ``published`` is set once the broker has taken the message (acknowledged at QoS 1).
        """
        correlation = message.correlation_data or uuid.uuid4().hex.encode()
        send, receive = anyio.create_memory_object_stream[MqttMessage](4)
        self._pending[correlation] = send
        try:
            await self.publish(
                MqttMessage(
                    topic=message.topic,
                    payload=message.payload,
                    qos=message.qos,
                    content_type=message.content_type,
                    correlation_data=correlation,
                    response_topic=self.reply_topic,
                    message_expiry_interval=message.message_expiry_interval,
                    user_properties=message.user_properties,
                )
            )
            if published is not None:
                published.set()
            with anyio.fail_after(timeout):
                return await receive.receive()
        finally:
            del self._pending[correlation]
            send.close()
            receive.close()

    async def request(
        self,
        topic: str,
        event: CloudEvent,
        *,
        timeout: float = 5.0,
        published: anyio.Event | None = None,
    ) -> CloudEvent:
        """Send ``event`` and return the decoded reply (``published``: see ``request_raw``)."""
        reply = await self.request_raw(to_mqtt(event, topic), timeout=timeout, published=published)
        return from_mqtt(reply)

    @asynccontextmanager
    async def watch(self, topic_filter: str) -> AsyncIterator[ObjectReceiveStream[MqttMessage]]:
        """Subscribe to ``topic_filter`` and receive its messages from the yielded stream."""
        send, receive = anyio.create_memory_object_stream[MqttMessage](1000)
        entry = (topic_filter, send)
        self._watchers.append(entry)
        await self._connection.subscribe(topic_filter)
        try:
            yield receive
        finally:
            self._watchers.remove(entry)
            send.close()
            receive.close()


@asynccontextmanager
async def connect_test_client(
    url: str, client_id: str | None = None
) -> AsyncIterator[MqttTestClient]:
    """Connect a ``MqttTestClient`` to the broker at ``url`` (mqtt://host:port)."""
    if not url.startswith(("mqtt://", "mqtts://")):
        raise ValueError(
            f"connect_test_client speaks to brokers at mqtt:// URLs, got {url!r} (for "
            "memory:// use gateway_mqtt.testing.connect_test_client)"
        )
    client_id = client_id or new_client_id()
    async with open_test_client(_AiomqttConnection.connect(url, client_id), client_id) as tester:
        yield tester


def new_client_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def open_test_client(
    connecting: AbstractAsyncContextManager[TestConnection], client_id: str
) -> AsyncIterator[MqttTestClient]:
    """A ``MqttTestClient`` over the connection ``connecting`` opens (any transport)."""
    async with connecting as connection, anyio.create_task_group() as tasks:
        tester = MqttTestClient(connection, client_id)
        await connection.subscribe(tester.reply_topic)
        tasks.start_soon(tester._route)
        yield tester
        tasks.cancel_scope.cancel()


class _AiomqttConnection:
    """A clean session over TCP; paho acknowledges on receipt."""

    def __init__(self, client: aiomqtt.Client) -> None:
        self._client = client

    @classmethod
    @asynccontextmanager
    async def connect(cls, url: str, client_id: str) -> AsyncIterator[TestConnection]:
        parts = urlsplit(url)
        client = aiomqtt.Client(
            parts.hostname or "localhost",
            parts.port or 1883,
            identifier=client_id,
            username=parts.username,
            password=parts.password,
            protocol=aiomqtt.ProtocolVersion.V5,
            socket_options=[_NODELAY],
        )
        client.pending_calls_threshold = 1000  # tests send many requests at once on purpose
        async with client:
            yield cls(client)

    async def subscribe(self, topic_filter: str) -> None:
        await self._client.subscribe(topic_filter, qos=1)

    async def publish(self, message: MqttMessage) -> None:
        await publish(self._client, message)

    async def messages(self) -> AsyncIterator[MqttMessage]:
        async for message in self._client.messages:
            yield from_client_message(message)
