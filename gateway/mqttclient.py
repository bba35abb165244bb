"""An MQTT v5 client for the MES (or equipment) side: ``gateway jobs``, the demo, tests.

It speaks only MQTT: it sends CloudEvents (or raw, deliberately malformed messages) with its own
Response Topic and waits for the reply carrying the same Correlation Data, and it watches topics
(retained messages first). ``connect_client`` connects it to a broker at ``mqtt://`` or
``mqtts://``; ``open_client`` runs it over any ``ClientConnection``, which is how the MQTT
plugin's in-process broker (``memory://<name>``) is reached: ``gateway_mqtt.clients
.connect_client`` takes every URL the MQTT binding takes, with the same API.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Protocol
from urllib.parse import unquote, urlsplit

import aiomqtt
import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectSendStream

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_client_message, from_mqtt, publish, to_mqtt
from gateway.errors import GatewayError
from gateway.topics import MES_REPLY_PREFIX, reply_topic
from gateway.transport import topic_matches

_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ClientConnection(Protocol):
    """What the client needs of a broker connection (acknowledging is automatic)."""

    async def subscribe(self, topic_filter: str) -> None: ...

    async def publish(self, message: MqttMessage) -> None: ...

    def messages(self) -> AsyncIterator[MqttMessage]: ...


class CloudEventClient:
    """Use through ``connect_client``; every reply topic and client id is unique."""

    def __init__(
        self, connection: ClientConnection, client_id: str, reply_prefix: str = MES_REPLY_PREFIX
    ) -> None:
        self._connection = connection
        self.client_id = client_id
        self.reply_topic = reply_topic(reply_prefix, client_id)
        self._pending: dict[bytes, MemoryObjectSendStream[MqttMessage]] = {}
        self._watchers: list[tuple[str, ObjectSendStream[MqttMessage]]] = []

    async def _route(self) -> None:
        async for incoming in self._connection.messages():
            if incoming.topic == self.reply_topic and incoming.correlation_data in self._pending:
                # Not awaited: the request may give up (and close its stream) meanwhile, and
                # a reply that comes as its request gives up is dropped, as one after it.
                with contextlib.suppress(
                    anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError
                ):
                    self._pending[incoming.correlation_data].send_nowait(incoming)
                continue
            for topic_filter, stream in list(self._watchers):
                if topic_matches(topic_filter, incoming.topic):
                    await _offer(stream, incoming)

    async def publish(self, message: MqttMessage) -> None:
        await self._connection.publish(message)

    async def send(self, topic: str, event: CloudEvent) -> None:
        await self.publish(to_mqtt(event, topic))

    async def request_raw(
        self,
        message: MqttMessage,
        *,
        timeout: float = 10.0,
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
        timeout: float = 10.0,
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


async def _offer(stream: ObjectSendStream[MqttMessage], message: MqttMessage) -> None:
    """Hand ``message`` to a reader; one that stopped reading meanwhile (its request timed
    out, its watch ended while this waited for room) no longer wants it."""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await stream.send(message)


class BrokerUnreachable(GatewayError):
    """The broker refused the connection or did not answer (the message says which, and where)."""


@asynccontextmanager
async def connect_client(
    url: str,
    client_id: str | None = None,
    *,
    reply_prefix: str = MES_REPLY_PREFIX,
    connect_timeout: float = 10.0,
) -> AsyncIterator[CloudEventClient]:
    """Connect a ``CloudEventClient`` to ``url``: mqtt://host:port or mqtts://host:port (TLS
    with the system's CAs); ``BrokerUnreachable`` when it cannot."""
    if not url.startswith(("mqtt://", "mqtts://")):
        raise BrokerUnreachable(
            f"expected an mqtt:// or mqtts:// broker URL, got {url!r} (memory:// brokers live "
            "in the MQTT plugin: use gateway_mqtt.clients.connect_client)"
        )
    client_id = client_id or new_client_id()
    connecting = _AiomqttConnection.connect(url, client_id, connect_timeout)
    async with open_client(connecting, client_id, reply_prefix=reply_prefix) as client:
        yield client


def new_client_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def open_client(
    connecting: AbstractAsyncContextManager[ClientConnection],
    client_id: str,
    *,
    reply_prefix: str = MES_REPLY_PREFIX,
) -> AsyncIterator[CloudEventClient]:
    """A ``CloudEventClient`` over the connection ``connecting`` opens (any transport)."""
    try:
        async with connecting as connection, anyio.create_task_group() as tasks:
            client = CloudEventClient(connection, client_id, reply_prefix)
            await connection.subscribe(client.reply_topic)
            tasks.start_soon(client._route)
            yield client
            tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The block's own error, not wrapped by the router's task group: callers catch it.
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0] from None
        raise


class _AiomqttConnection:
    """A clean session over TCP; paho acknowledges on receipt."""

    def __init__(self, client: aiomqtt.Client) -> None:
        self._client = client

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str, client_id: str, connect_timeout: float
    ) -> AsyncIterator[ClientConnection]:
        parts = urlsplit(url)
        tls = parts.scheme == "mqtts"
        host, port = parts.hostname or "localhost", parts.port or (8883 if tls else 1883)
        client = aiomqtt.Client(
            host,
            port,
            identifier=client_id,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            protocol=aiomqtt.ProtocolVersion.V5,
            socket_options=[_NODELAY],
            tls_context=ssl.create_default_context() if tls else None,
            timeout=connect_timeout,
        )
        client.pending_calls_threshold = 1000  # tests send many requests at once on purpose
        async with AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(client)
            except aiomqtt.MqttError as error:
                raise BrokerUnreachable(
                    f"cannot reach the MQTT broker at {host}:{port} ({error})"
                ) from None
            yield cls(client)

    async def subscribe(self, topic_filter: str) -> None:
        await self._client.subscribe(topic_filter, qos=1)

    async def publish(self, message: MqttMessage) -> None:
        await publish(self._client, message)

    async def messages(self) -> AsyncIterator[MqttMessage]:
        async for message in self._client.messages:
            yield from_client_message(message)
