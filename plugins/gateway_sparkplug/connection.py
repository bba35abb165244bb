"""The MQTT connection of one edge node: its own, with the NDEATH as its Will.

Sparkplug 3.0 asks for Clean Start and a Session Expiry Interval of 0 (no state kept on the
broker between connections), and for the NDEATH as the Will (QoS 1, not retained) with the
``bdSeq`` of the NBIRTH that follows. The gateway's command connection keeps its persistent
session and its shared subscriptions, so Sparkplug never shares it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

MAX_QUEUED = 10_000


@dataclass(frozen=True)
class BrokerAddress:
    url: str
    username: str | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None
    keepalive: int = 30

    def client(self, client_id: str, will: aiomqtt.Will | None) -> aiomqtt.Client:
        parts = urlsplit(self.url)
        secure = parts.scheme == "mqtts"
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.SessionExpiryInterval = 0
        return aiomqtt.Client(
            parts.hostname or "localhost",
            parts.port or (8883 if secure else 1883),
            identifier=client_id,
            username=self.username or (unquote(parts.username) if parts.username else None),
            password=self.password or (unquote(parts.password) if parts.password else None),
            protocol=aiomqtt.ProtocolVersion.V5,
            clean_start=True,
            properties=properties,
            will=will,
            keepalive=self.keepalive,
            tls_context=self.tls or (ssl.create_default_context() if secure else None),
            timeout=10,
            # A broker that stops reading must not grow the client's queue for ever: past this,
            # a publish fails, the term ends and the next one is born afresh.
            max_queued_outgoing_messages=MAX_QUEUED,
        )


@asynccontextmanager
async def edge_connection(
    broker: BrokerAddress, client_id: str, will_topic: str, will_payload: bytes
) -> AsyncIterator[aiomqtt.Client]:
    """Connected, with the Will set; a clean disconnect on leaving (which drops the Will)."""
    will = aiomqtt.Will(will_topic, will_payload, qos=1, retain=False)
    async with broker.client(client_id, will) as client:
        yield client
