"""A CloudEvent client for every URL the MQTT binding takes: mqtt://, mqtts:// and memory://.

``connect_client(url)`` is ``gateway.mqttclient.connect_client`` that also reaches the
in-process broker (``gateway_mqtt.memory``), so the demo and tests run unchanged on either.
``connect_test_client`` is the same, under the name tests use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway import mqttclient
from gateway.codecs.mqtt import MqttMessage
from gateway.mqttclient import ClientConnection, CloudEventClient, new_client_id, open_client
from gateway.topics import MES_REPLY_PREFIX
from gateway_mqtt import memory

__all__ = ["CloudEventClient", "connect_client", "connect_test_client"]


@asynccontextmanager
async def connect_client(
    url: str,
    client_id: str | None = None,
    *,
    reply_prefix: str = MES_REPLY_PREFIX,
    connect_timeout: float = 10.0,
) -> AsyncIterator[CloudEventClient]:
    """Connect a ``CloudEventClient`` to ``url``: mqtt://host:port, mqtts://host:port or
    memory://<broker name>; ``gateway.mqttclient.BrokerUnreachable`` when it cannot."""
    name = memory.broker_name(url)
    if name is None:
        async with mqttclient.connect_client(
            url, client_id, reply_prefix=reply_prefix, connect_timeout=connect_timeout
        ) as client:
            yield client
        return
    client_id = client_id or new_client_id()
    connecting = _MemoryConnection.connect(name, client_id)
    async with open_client(connecting, client_id, reply_prefix=reply_prefix) as client:
        yield client


connect_test_client = connect_client


class _MemoryConnection:
    """A clean session on the in-process broker, acknowledging each message as it is read."""

    def __init__(self, connection: memory.Connection) -> None:
        self._connection = connection

    @classmethod
    @asynccontextmanager
    async def connect(cls, name: str, client_id: str) -> AsyncIterator[ClientConnection]:
        async with memory.get_broker(name).connect(client_id) as connection:
            yield cls(connection)

    async def subscribe(self, topic_filter: str) -> None:
        await self._connection.subscribe([(topic_filter, 1)])

    async def publish(self, message: MqttMessage) -> None:
        await self._connection.publish(message)

    async def messages(self) -> AsyncIterator[MqttMessage]:
        async for delivery in self._connection:
            if delivery.packet_id is not None:
                self._connection.ack(delivery.packet_id)
            yield delivery.message
