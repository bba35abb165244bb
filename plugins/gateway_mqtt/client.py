"""The few MQTT client operations the binding needs, over aiomqtt or the in-process broker.

``MqttBinding`` is written once against ``MqttClient``; ``connector_for`` picks the
implementation from the URL: aiomqtt (paho) for ``mqtt://`` and ``mqtts://``, the in-process
broker of ``gateway_mqtt.memory`` for ``memory://<name>``. Both give the binding the same
guarantees: a message is acknowledged only when the binding calls ``Received.ack`` (after it was
handled), and a dropped connection surfaces as ``ConnectionLost`` wherever it is noticed.
"""

from __future__ import annotations

import asyncio
import math
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, Self

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.codecs.mqtt import MqttMessage, from_client_message, publish, publish_properties
from gateway.errors import GatewayError, SettingsError, ValidationError
from gateway.resilience import TransientError
from gateway_mqtt import decoding, memory
from gateway_mqtt.settings import MqttSettings, broker_address

decoding.install()  # every message the gateway receives: see gateway_mqtt.decoding

NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
# CONNACK reason codes that no amount of retrying will fix.
_REFUSED_FOR_GOOD = {"Bad user name or password", "Not authorized", "Client identifier not valid"}
# TLS failures that no amount of retrying will fix (OpenSSL reason names, as in ssl.SSLError's
# text), and what they most likely mean.
_TLS_FAILURES = {
    "CERTIFICATE_VERIFY_FAILED": "the broker's certificate is not trusted (mqtt.tls_ca_file) "
    "or does not name the host in mqtt.url",
    "CERTIFICATE_REQUIRED": "the broker requires a client certificate (mqtt.tls_cert_file)",
    "ALERT_BAD_CERTIFICATE": "the broker refused the client certificate",
    "ALERT_UNKNOWN_CA": "the broker does not trust the client certificate's CA",
    "ALERT_CERTIFICATE_UNKNOWN": "the broker refused the client certificate",
    "ALERT_CERTIFICATE_EXPIRED": "the broker says the client certificate has expired",
    "ALERT_CERTIFICATE_REVOKED": "the broker says the client certificate was revoked",
    "ALERT_UNSUPPORTED_CERTIFICATE": "the broker refused the client certificate",
}


class PublishRefused(GatewayError):
    """The broker acknowledged a publish with a failure reason code (MQTT v5 PUBACK >= 0x80,
    e.g. 0x87 Not authorized: its ACL denies the topic). Sending it again changes nothing."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"the broker refused the publish on {topic}: {reason}")
        self.topic = topic
        self.reason = reason


class ConnectionLost(TransientError):
    """The broker connection failed or dropped; ``refused_for_good`` when retrying is futile,
    ``taken_over`` when the broker closed it because another client connected with the same
    client id (MQTT v5 reason code 0x8E, Session taken over)."""

    def __init__(
        self, reason: str, *, refused_for_good: bool = False, taken_over: bool = False
    ) -> None:
        super().__init__(reason)
        self.refused_for_good = refused_for_good
        self.taken_over = taken_over


SESSION_TAKEN_OVER = 0x8E  # MQTT v5 DISCONNECT reason code


@dataclass(frozen=True)
class Received:
    """An incoming message; ``ack`` sends its PUBACK (a no-op at QoS 0)."""

    message: MqttMessage
    ack: Callable[[], None]


class MqttClient(Protocol):
    """One connected MQTT v5 session."""

    @property
    def session_present(self) -> bool:
        """Whether the broker still had this client's session when it connected."""
        ...

    async def subscribe(self, filters: Mapping[str, int]) -> None: ...

    async def unsubscribe(self, filters: Sequence[str]) -> None: ...

    async def publish(self, message: MqttMessage) -> None:
        """Publish; at QoS 1 returns once the broker acknowledged."""
        ...

    def messages(self) -> AsyncIterator[Received]:
        """Incoming messages until the connection drops (then ``ConnectionLost``)."""
        ...


class Connector(Protocol):
    """Opens sessions to one broker."""

    where: str  # the broker, for logs and errors (no credentials)

    def connect(self) -> AbstractAsyncContextManager[MqttClient]:
        """A persistent session (clean start off, session expiry), closed on exit."""
        ...


def connector_for(settings: MqttSettings, client_id: str) -> Connector:
    """The connector for ``settings.url``'s scheme."""
    try:
        name = memory.broker_name(settings.url)
    except ValidationError:
        raise SettingsError("mqtt.url", "expected memory://<broker name>") from None
    if name is not None:
        return InProcessConnector(settings, client_id, name)
    return AiomqttConnector(settings, client_id)


# -- aiomqtt (mqtt://, mqtts://) ------------------------------------------------------------


class AiomqttConnector:
    """Sessions over TCP (TLS for mqtts://) with TCP_NODELAY and manual acknowledgement.

    The TLS context is built again for every connection, so renewed certificate files are
    picked up at the next reconnect; it is also built once here, so a missing or broken
    certificate file stops start-up naming its setting.
    """

    def __init__(self, settings: MqttSettings, client_id: str) -> None:
        self.settings = settings
        self.client_id = client_id
        self.address = broker_address(settings)
        self.where = f"{self.address.host}:{self.address.port}"
        self._tls_context()

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MqttClient]:
        try:
            async with self._client() as client:
                yield AiomqttClient(client)
        except aiomqtt.MqttError as error:
            reason, for_good = _explain(error)
            raise ConnectionLost(reason, refused_for_good=for_good) from None

    def _client(self) -> aiomqtt.Client:
        connect_properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        connect_properties.SessionExpiryInterval = self.settings.session_expiry_seconds
        # The lane's handler budget, as the broker's window of unacknowledged messages to it
        # (we ack once handled): without it mosquitto sends 20 at a time, whatever the budget.
        connect_properties.ReceiveMaximum = self.settings.max_concurrent_handlers
        # The broker sends nothing larger (it drops such a message for this session), so a
        # peer's huge publish never reaches the gateway's memory: the payload limit plus room
        # for the topic and the CloudEvent's properties.
        connect_properties.MaximumPacketSize = max_packet_bytes(self.settings)
        client = _Client(
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
        # Many tasks publish at once by design (handlers, status events; those wait for their
        # acknowledgements in the background, up to 1,000); aiomqtt would warn from 10 on.
        client.pending_calls_threshold = PENDING_PUBLISHES_WARNING
        return client

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self.address.tls:
            return None
        settings = self.settings
        try:
            context = ssl.create_default_context(cafile=settings.tls_ca_file or None)
        except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
            raise SettingsError(
                "mqtt.tls_ca_file", f"cannot load CA bundle {settings.tls_ca_file!r}: {error}"
            ) from None
        if settings.tls_cert_file:
            try:
                context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file or None)
            except (OSError, ValueError) as error:
                files = ", ".join(
                    repr(name) for name in (settings.tls_cert_file, settings.tls_key_file) if name
                )
                raise SettingsError(
                    "mqtt.tls_cert_file",
                    f"cannot load the client certificate and key from {files}: {error}",
                ) from None
        elif settings.tls_key_file:
            raise SettingsError("mqtt.tls_key_file", "is set, but mqtt.tls_cert_file is not")
        if not settings.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


# Publishes waiting for their acknowledgements before aiomqtt logs a warning about them.
PENDING_PUBLISHES_WARNING = 2000


class _Client(aiomqtt.Client):
    """aiomqtt's client, failing the connection attempt when the broker drops it before CONNACK.

    aiomqtt (2.5) waits for CONNACK without a timeout and ignores a disconnect that comes
    before it, so start-up would hang for good when a TLS 1.3 broker rejects the client
    certificate (its alert arrives after the handshake, at the first read) or the listener
    speaks TLS and the URL does not. The reason is what paho logged last as an error.
    """

    disconnect_reason: Any = None  # the DISCONNECT reason code of the last drop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused: dict[int, str] = {}  # message id -> failure reason of its PUBACK
        self._last_error = ""
        self._client.on_log = self._remember_error
        self.session_present = False
        self._loop_thread = threading.get_ident()
        self._writing = False

    def _on_socket_register_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        """Write a packet at once instead of when the loop next finds the socket writable.

        aiomqtt's way costs every packet sent (commands, replies, acknowledgements) a wake-up
        of the loop, two loop turns and two changes of the poller's set (measured: a command
        reaches its socket 35 us sooner, 90 instead of 125). Only what the socket cannot take
        now waits for writability, the aiomqtt way; so does a packet queued off the loop's
        thread (paho connects in an executor) or from inside one of paho's callbacks (where
        paho itself does not write).
        """
        if not self._may_write_now(client):
            self._loop.call_soon_threadsafe(self._write_when_writable, client, sock)
            return
        self._writing = True
        try:
            client.loop_write()
        except Exception as error:  # what aiomqtt's writer does: the connection is lost
            self._lose(error)
            return
        finally:
            self._writing = False
        # The socket's buffer is full: the rest once it drains.
        if client.want_write():
            self._write_when_writable(client, sock)

    def _write_when_writable(self, client: paho.Client, sock: Any) -> None:
        """aiomqtt's writer (on the loop's thread), only while paho still has this socket open.

        aiomqtt asks for it from paho's connecting thread with the socket's number, and the
        loop registers it later: a broker that refuses the TLS handshake (a client
        certificate required) has had the socket closed by then, and registering the number
        fails in the loop (``EBADF``), or watches another socket that took the number.
        """
        current = client.socket()
        if current is None or current is not sock or current.fileno() < 0:  # closed, or another
            return
        fileno = current.fileno()

        def write() -> None:
            try:
                client.loop_write()
            except Exception as error:
                self._lose(error)

        self._loop.add_writer(fileno, write)

    def _lose(self, error: Exception) -> None:
        """What aiomqtt does when a write fails: the connection is lost."""
        if not self._disconnected.done():
            self._disconnected.set_exception(error)

    def _may_write_now(self, client: paho.Client) -> bool:
        if self._writing or threading.get_ident() != self._loop_thread:
            return False
        # paho's own test before it writes a queued packet itself (it takes this lock around
        # user callbacks, and writing may call one).
        in_callback = getattr(client, "_in_callback_mutex", None)
        if in_callback is None or not in_callback.acquire(blocking=False):
            return False
        in_callback.release()
        return True

    def _on_connect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.ConnectFlags,
        reason_code: Any,
        properties: Properties | None = None,
    ) -> None:
        self.session_present = bool(flags.session_present)  # aiomqtt does not keep it
        # Send as many unacknowledged messages as the broker takes (its Receive Maximum;
        # 65535 when it gives none), not paho's fixed 20: beyond those, every publish waits
        # in paho's queue for an acknowledgement to another one. paho 2.2 has no setting for
        # it and refuses its setter once connected, for fear of a change from or to 0 (no
        # limit); this is one positive limit for another, before paho sends what it queued.
        client._max_inflight_messages = getattr(properties, "ReceiveMaximum", 65535)
        super()._on_connect(client, userdata, flags, reason_code, properties)

    async def __aenter__(self) -> Self:
        self._client.on_log = self._remember_error
        await super().__aenter__()
        # Connected: no more use for the reason. With an ``on_log`` hook paho formats a debug
        # line (its properties included) for every packet sent and received.
        self._client.on_log = None
        return self

    def _on_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason_code: Any, properties: Any
    ) -> None:
        # aiomqtt drops the PUBACK's reason code: a publish the broker refused (0x87 Not
        # authorized, 0x97 Quota exceeded...) would look delivered.
        if getattr(reason_code, "is_failure", False):
            self._refused[mid] = f"{reason_code} (0x{int(reason_code.value):02x})"
        super()._on_publish(client, userdata, mid, reason_code, properties)

    async def publish_checked(self, topic: str, payload: bytes, **options: Any) -> None:
        """aiomqtt's ``publish``, then ``PublishRefused`` when the PUBACK says the broker
        refused it. The PUBACK of a QoS 1 publish comes on a later turn of the loop, after
        paho's ``publish`` returned the message id, so a refusal left by an earlier message
        with the same (reused) id is dropped first."""
        info = self._client.publish(topic, payload, **options)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
        self._refused.pop(info.mid, None)
        if not info.is_published():
            await self._confirmed(info.mid)
        reason = self._refused.pop(info.mid, None)
        if reason is not None:
            raise PublishRefused(topic, reason)

    async def _confirmed(self, mid: int) -> None:
        """Until the PUBACK of ``mid`` (aiomqtt's ``_on_publish`` sets its event), or
        ``MqttError`` after the client's timeout, as aiomqtt's ``publish`` waits.

        aiomqtt's own wait costs every publish a task (``asyncio.wait_for`` with a timeout)
        and two walks over all the pending calls' ids (up to a thousand at 40 jobs); this
        one a timer and a few dictionary operations."""
        pending = self._pending_publishes
        if mid in pending or mid in self._pending_subscribes or mid in self._pending_unsubscribes:
            raise RuntimeError(f'There already exists a pending call for message ID "{mid}"')
        confirmation = pending[mid] = asyncio.Event()
        try:
            calls = len(pending) + len(self._pending_subscribes) + len(self._pending_unsubscribes)
            if calls > self.pending_calls_threshold:
                self._logger.warning("There are %d pending publish calls.", calls)
            async with asyncio.timeout(None if self.timeout == math.inf else self.timeout):
                await confirmation.wait()
        except TimeoutError:
            raise aiomqtt.MqttError("Operation timed out") from None
        finally:
            if pending.get(mid) is confirmation:  # not confirmed (the callback pops it)
                del pending[mid]

    def _remember_error(self, client: paho.Client, userdata: Any, level: int, text: str) -> None:
        if level == paho.MQTT_LOG_ERR:
            self._last_error = text

    def _on_disconnect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.DisconnectFlags,
        reason_code: Any,
        properties: Properties | None = None,
    ) -> None:
        self.disconnect_reason = getattr(reason_code, "value", reason_code)
        if not self._connected.done():
            reason = self._last_error or str(reason_code)
            self._connected.set_exception(
                aiomqtt.MqttError(f"the broker closed the connection before accepting it: {reason}")
            )
            # Marks it retrieved: no "exception never retrieved" warning if no one awaits it
            # (a connection attempt cancelled meanwhile); an awaiting __aenter__ still raises it.
            self._connected.exception()
            return
        super()._on_disconnect(client, userdata, flags, reason_code, properties)


class AiomqttClient:
    def __init__(self, client: aiomqtt.Client) -> None:
        self._client = client

    @property
    def session_present(self) -> bool:
        return bool(getattr(self._client, "session_present", False))

    async def subscribe(self, filters: Mapping[str, int]) -> None:
        try:
            await self._client.subscribe(list(filters.items()))
        except aiomqtt.MqttError as error:
            raise ConnectionLost(str(error)) from None

    async def unsubscribe(self, filters: Sequence[str]) -> None:
        try:
            await self._client.unsubscribe(list(filters))
        except aiomqtt.MqttError as error:
            raise ConnectionLost(str(error)) from None

    async def publish(self, message: MqttMessage) -> None:
        """Publish; ``PublishRefused`` when the broker acknowledged with a failure code."""
        try:
            if isinstance(self._client, _Client):
                await self._client.publish_checked(
                    message.topic,
                    message.payload,
                    qos=message.qos,
                    retain=message.retain,
                    properties=publish_properties(message),
                )
            else:
                await publish(self._client, message)
        except aiomqtt.MqttError as error:
            raise ConnectionLost(str(error)) from None

    def messages(self) -> AsyncIterator[Received]:
        return _AiomqttMessages(self._client)


class _AiomqttMessages:
    def __init__(self, client: aiomqtt.Client) -> None:
        self._client = client
        self._messages = client.messages

    def __aiter__(self) -> _AiomqttMessages:
        return self

    async def __anext__(self) -> Received:
        try:
            message = await anext(self._messages)
        except aiomqtt.MqttError as error:
            if getattr(self._client, "disconnect_reason", None) == SESSION_TAKEN_OVER:
                raise ConnectionLost(
                    "session taken over: another client connected with this client id "
                    "(MQTT reason code 0x8E)",
                    taken_over=True,
                ) from None
            raise ConnectionLost(str(error)) from None
        return Received(from_client_message(message), lambda: self._ack(message))

    def _ack(self, message: aiomqtt.Message) -> None:
        self._client._client.ack(message.mid, message.qos)


PACKET_HEADROOM = 65_536  # topic, MQTT v5 properties and CloudEvent attributes of a message


def max_packet_bytes(settings: MqttSettings) -> int:
    """The MQTT v5 Maximum Packet Size the gateway asks of the broker."""
    return settings.max_payload_bytes + PACKET_HEADROOM


def _explain(error: aiomqtt.MqttError) -> tuple[str, bool]:
    """The reason a connection failed, and whether retrying is futile (refused credentials,
    certificates that do not fit). Never contains the password: neither paho nor OpenSSL
    put it in their messages."""
    text = str(error)
    if isinstance(error, aiomqtt.MqttCodeError) and str(error.rc) in _REFUSED_FOR_GOOD:
        return text, True
    for marker, meaning in _TLS_FAILURES.items():
        if marker in text:
            return f"TLS: {meaning} ({text})", True
    return text, False


# -- the in-process broker (memory://) ----------------------------------------------------------


class InProcessConnector:
    """Sessions on the in-process broker registered under ``name``.

    The binding's ``max_concurrent_handlers`` becomes the session's Receive Maximum, so
    messages beyond it wait unacknowledged at the broker, as the setting promises.
    """

    def __init__(self, settings: MqttSettings, client_id: str, name: str) -> None:
        self.settings = settings
        self.client_id = client_id
        self.name = name
        self.where = f"{memory.SCHEME}://{name}"

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MqttClient]:
        connection = memory.get_broker(self.name).connect(
            self.client_id,
            clean_start=False,
            session_expiry_interval=self.settings.session_expiry_seconds,
            receive_maximum=self.settings.max_concurrent_handlers,
        )
        async with connection:
            yield InProcessClient(connection)


class InProcessClient:
    def __init__(self, connection: memory.Connection) -> None:
        self._connection = connection

    @property
    def session_present(self) -> bool:
        return self._connection.session_present

    async def subscribe(self, filters: Mapping[str, int]) -> None:
        try:
            await self._connection.subscribe(list(filters.items()))
        except memory.ConnectionClosed as error:
            raise ConnectionLost(str(error)) from None

    async def unsubscribe(self, filters: Sequence[str]) -> None:
        try:
            await self._connection.unsubscribe(filters)
        except memory.ConnectionClosed as error:
            raise ConnectionLost(str(error)) from None

    async def publish(self, message: MqttMessage) -> None:
        try:
            await self._connection.publish(message)
        except memory.ConnectionClosed as error:
            raise ConnectionLost(str(error)) from None

    def messages(self) -> AsyncIterator[Received]:
        return _InProcessMessages(self._connection)


class _InProcessMessages:
    def __init__(self, connection: memory.Connection) -> None:
        self._connection = connection

    def __aiter__(self) -> _InProcessMessages:
        return self

    async def __anext__(self) -> Received:
        try:
            delivery = await self._connection.receive()
        except memory.ConnectionClosed as error:
            raise ConnectionLost(str(error)) from None
        return Received(delivery.message, lambda: self._ack(delivery))

    def _ack(self, delivery: memory.Delivery) -> None:
        if delivery.packet_id is not None:
            self._connection.ack(delivery.packet_id)
