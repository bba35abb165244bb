"""Test clients for the MQTT plugin's transports: ``mqtt://`` brokers and ``memory://`` ones.

``connect_test_client(url)`` is ``gateway.testing.mqtt.connect_test_client`` that also reaches
the in-process broker (``gateway_mqtt.memory``), so a test runs unchanged on either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.codecs.mqtt import MqttMessage
from gateway.testing import mqtt as testing_mqtt
from gateway.testing.mqtt import MqttTestClient, TestConnection, new_client_id, open_test_client
from gateway_mqtt import memory

__all__ = ["MqttTestClient", "connect_test_client"]


@asynccontextmanager
async def connect_test_client(
    url: str, client_id: str | None = None
) -> AsyncIterator[MqttTestClient]:
    """Connect a ``MqttTestClient`` to ``url``: mqtt://host:port or memory://<broker name>."""
    name = memory.broker_name(url)
    if name is None:
        async with testing_mqtt.connect_test_client(url, client_id) as tester:
            yield tester
        return
    client_id = client_id or new_client_id()
    async with open_test_client(_MemoryConnection.connect(name, client_id), client_id) as tester:
        yield tester


class _MemoryConnection:
    """A clean session on the in-process broker, acknowledging each message as it is read."""

    def __init__(self, connection: memory.Connection) -> None:
        self._connection = connection

    @classmethod
    @asynccontextmanager
    async def connect(cls, name: str, client_id: str) -> AsyncIterator[TestConnection]:
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
