"""How a simulated device reaches the gateway: one link per device, per transport.

A link connects as the equipment would (its own connection, its own identity), passes the
commands it receives to ``Device.answer``, sends the answers back, sends the device's events
and heartbeats, and says goodbye when the simulator stops. Two transports:

- ``MqttDeviceLink`` speaks the MQTT equipment conventions (``gateway_mqtt_equipment``): its own
  MQTT client (logged in as the device's own user when it has a password, as a broker ACL
  with per-equipment users wants), commands on ``<prefix>/<device>/commands``, replies to
  their Response Topic (``<prefix>/<device>/replies``), events and heartbeats on the device's
  topics, an offline event as goodbye and Will;
- ``RpcDeviceLink`` speaks MessagePack-RPC (``gateway_msgpack_rpc.RpcDevice``): it connects to
  the gateway's RPC server, says hello with the device's name (and its token, when it has
  one), takes ``command`` notifications and publishes the replies and events; heartbeats as
  the server asks.

Both read commands and build replies and events with ``device_command``, ``reply_event`` and
``equipment_event`` (the CloudEvent shape of ``gateway.equipment``), and the device answers a
repeated correlation id from memory whichever link brought it.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol
from urllib.parse import unquote, urlsplit

import aiomqtt
import anyio
from anyio.abc import TaskGroup, TaskStatus
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.cloudevents import JSON, MSGPACK, CloudEvent, utc_now
from gateway.codecs.mqtt import (
    MqttMessage,
    correlation_of,
    from_client_message,
    from_mqtt,
    publish,
    to_mqtt,
)
from gateway.equipment import EQUIPMENT_ATTRIBUTE, JOB_ORDER_ATTRIBUTE
from gateway.errors import CloudEventError, GatewayError
from gateway.topics import EquipmentTopics
from gateway.transport import INVALID_REQUEST, error_event
from gateway_mqtt_equipment import HEARTBEAT_TYPE, OFFLINE_TYPE
from gateway_msgpack_rpc import RpcDevice
from gateway_simulator.devices import Answer, Device, DeviceCommand, DeviceEvent

log = logging.getLogger(__name__)

NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
RECONNECT_MAX_SECONDS = 5.0


class DeviceLink(Protocol):
    """Connects one device to the gateway over one transport."""

    device: Device

    async def run(self, stopping: anyio.Event, *, task_status: TaskStatus[None]) -> None:
        """Connect (retrying until it works), call ``task_status.started()``, then serve the
        device's commands, events and heartbeats; when ``stopping`` is set, say goodbye,
        disconnect and return."""
        ...


class MqttDeviceLink:
    """A device speaking MQTT v5 with its own client, as real equipment does."""

    def __init__(
        self,
        device: Device,
        *,
        url: str,
        topics: EquipmentTopics,
        heartbeat_seconds: float,
        client_id: str,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.device = device
        self.url = url
        self.credentials = credentials  # (user, password); None: the URL's
        self.topics = topics
        self.heartbeat_seconds = heartbeat_seconds
        self.client_id = client_id
        self.source = f"urn:station-gateway:simulator:{device.name}"
        self._client: aiomqtt.Client | None = None
        device.emit = self.publish_event

    # -- connection -----------------------------------------------------------------------------

    async def run(
        self, stopping: anyio.Event, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        started = False
        delay = 0.1

        def connected() -> None:
            nonlocal started, delay
            delay = 0.1
            if not started:
                started = True
                task_status.started()

        while not stopping.is_set():
            try:
                async with self._connect() as client:
                    await self._serve(client, stopping, connected)
            except* aiomqtt.MqttError as lost:  # from the reader, a heartbeat or a reply
                log.warning(
                    "simulated %s: MQTT connection lost or refused (%s); retrying in %.1f s",
                    self.device.name,
                    lost.exceptions[0],
                    delay,
                )
                with anyio.move_on_after(delay):
                    await stopping.wait()
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)
            finally:
                self._client = None
        if not started:  # asked to stop before it ever connected
            task_status.started()

    def _connect(self) -> aiomqtt.Client:
        parts = urlsplit(self.url)
        tls = parts.scheme in ("mqtts", "ssl")
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        if self.credentials is not None:
            username, password = self.credentials
        client = aiomqtt.Client(
            parts.hostname or "localhost",
            parts.port or (8883 if tls else 1883),
            identifier=self.client_id,
            username=username,
            password=password,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=self._will(),
            keepalive=max(5, round(self.heartbeat_seconds * 5)),
            tls_context=ssl.create_default_context() if tls else None,
            socket_options=[NODELAY],
        )
        client.pending_calls_threshold = 1000  # one task per command by design
        return client

    async def _serve(
        self, client: aiomqtt.Client, stopping: anyio.Event, connected: Callable[[], None]
    ) -> None:
        await client.subscribe(self.topics.commands(self.device.name), qos=1)
        self._client = client
        await self._heartbeat(client)
        log.info("simulated %s %s online", self.device.kind, self.device.name)
        connected()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._beat, client)
            tasks.start_soon(self._read, client, tasks)
            await stopping.wait()
            tasks.cancel_scope.cancel()
        with anyio.move_on_after(2):
            goodbye = self._offline("shut down")
            await self._send(client, self.topics.heartbeat(self.device.name), goodbye, 1)
        log.info("simulated %s %s offline", self.device.kind, self.device.name)

    async def _read(self, client: aiomqtt.Client, tasks: TaskGroup) -> None:
        async for message in client.messages:
            tasks.start_soon(self._handle, client, from_client_message(message))

    # -- commands -------------------------------------------------------------------------------

    async def _handle(self, client: aiomqtt.Client, incoming: MqttMessage) -> None:
        try:
            event = from_mqtt(incoming)
        except CloudEventError as error:
            log.warning("simulated %s: malformed command: %s", self.device.name, error)
            reply = error_event(source=self.source, code=INVALID_REQUEST, message=str(error))
        else:
            answer = await self.device.answer(device_command(event))
            reply = reply_event(event, answer, self.source)
        if incoming.response_topic is None:
            return
        outgoing = to_mqtt(reply, incoming.response_topic)
        # Echo the command's Correlation Data byte for byte (MQTT request/response).
        outgoing = dataclasses.replace(outgoing, correlation_data=correlation_of(incoming))
        await publish(client, outgoing)

    # -- events and heartbeats ------------------------------------------------------------------

    async def publish_event(self, event: DeviceEvent) -> None:
        """``Device.emit``: the event on the device's events topic (QoS 1)."""
        client = self._client
        if client is None:
            log.warning("simulated %s offline: event %s lost", self.device.name, event.type)
            return
        cloud_event = equipment_event(event, self.device.name, self.source)
        await self._send(client, self.topics.events(self.device.name), cloud_event, 1)

    async def _beat(self, client: aiomqtt.Client) -> None:
        while True:
            await anyio.sleep(self.heartbeat_seconds)
            await self._heartbeat(client)

    async def _heartbeat(self, client: aiomqtt.Client) -> None:
        heartbeat = self._event(
            HEARTBEAT_TYPE, {"interval_seconds": self.heartbeat_seconds}, equipment=self.device.name
        )
        await self._send(client, self.topics.heartbeat(self.device.name), heartbeat, 0)

    def _offline(self, reason: str) -> CloudEvent:
        return self._event(OFFLINE_TYPE, {"reason": reason}, equipment=self.device.name)

    def _will(self) -> aiomqtt.Will:
        """The offline event, sent by the broker if the connection dies without a goodbye."""
        offline = self._offline("connection lost")
        message = to_mqtt(offline, self.topics.heartbeat(self.device.name), qos=1)
        properties = Properties(PacketTypes.WILLMESSAGE)  # type: ignore[no-untyped-call]
        properties.ContentType = message.content_type or JSON
        properties.UserProperty = list(message.user_properties)
        return aiomqtt.Will(message.topic, message.payload, qos=1, properties=properties)

    def _event(
        self, type: str, data: object, *, scope: str | None = None, **extensions: str
    ) -> CloudEvent:
        return CloudEvent(
            type=type,
            source=self.source,
            subject=scope,
            time=utc_now(),
            datacontenttype=JSON,
            data=data,
            extensions=extensions,
        )

    @staticmethod
    async def _send(client: aiomqtt.Client, topic: str, event: CloudEvent, qos: int) -> None:
        await publish(client, to_mqtt(event, topic, qos=qos))


class RpcDeviceLink:
    """A device speaking MessagePack-RPC: it connects to the gateway's RPC server as equipment
    does, with its name as equipment id, and reconnects when the connection ends.

    Commands are worked on in the link's own tasks (the connection's request slots stay free for
    the replies), and work in hand goes on across a reconnection: its answer is published over
    whichever connection is up when it is done.
    """

    def __init__(
        self,
        device: Device,
        *,
        host: str,
        port: int,
        heartbeat_seconds: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        self.device = device
        self.host = host
        self.port = port
        self.token = token  # proves the device's name to a server that asks for tokens
        self.heartbeat_seconds = heartbeat_seconds  # None: as the gateway's hello answer asks
        self.ssl_context = ssl_context
        self.source = f"urn:station-gateway:simulator:{device.name}"
        self._rpc: RpcDevice | None = None
        self._work: TaskGroup | None = None
        device.emit = self.publish_event

    async def run(
        self, stopping: anyio.Event, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        started = False
        delay = 0.1
        async with anyio.create_task_group() as work:
            self._work = work
            while not stopping.is_set():
                try:
                    async with RpcDevice.connect(
                        self.host,
                        self.port,
                        self.device.name,
                        source=self.source,
                        on_command=self._command,
                        heartbeat_seconds=self.heartbeat_seconds,
                        ssl_context=self.ssl_context,
                        token=self.token,
                    ) as rpc:
                        self._rpc = rpc
                        delay = 0.1
                        log.info("simulated %s %s online (RPC)", self.device.kind, self.device.name)
                        if not started:
                            started = True
                            task_status.started()
                        await _first_of(stopping.wait, rpc.wait_closed)
                        self._rpc = None
                        closed = rpc.connection.close_reason
                    if not stopping.is_set():
                        log.warning(
                            "simulated %s: RPC connection ended (%s); reconnecting",
                            self.device.name,
                            closed or "closed",
                        )
                except (OSError, GatewayError) as error:  # refused, or lost during hello
                    log.warning(
                        "simulated %s: cannot connect to the RPC server %s:%d (%s); "
                        "retrying in %.1f s",
                        self.device.name,
                        self.host,
                        self.port,
                        str(error) or type(error).__name__,
                        delay,
                    )
                finally:
                    self._rpc = None
                with anyio.move_on_after(delay):
                    await stopping.wait()
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)
            work.cancel_scope.cancel()
        self._work = None
        log.info("simulated %s %s offline", self.device.kind, self.device.name)
        if not started:  # asked to stop before it ever connected
            task_status.started()

    async def _command(self, event: CloudEvent) -> None:
        """``RpcDevice``'s command handler: returns at once, the work goes on in the link."""
        if self._work is None:
            log.warning("simulated %s: command %s while stopping", self.device.name, event.id)
            return
        self._work.start_soon(self._handle, event)

    async def _handle(self, event: CloudEvent) -> None:
        try:
            answer = await self.device.answer(device_command(event))
        except Exception:  # a bug in the device must not stop the simulator
            log.exception("simulated %s: command %s failed", self.device.name, event.id)
            return
        reply = reply_event(event, answer, self.source)
        rpc = self._rpc
        if rpc is None:
            log.warning("simulated %s offline: reply to %s lost", self.device.name, event.id)
            return
        try:
            await rpc.publish(reply)
        except GatewayError as error:  # the connection broke, or the gateway refused it
            log.warning(
                "simulated %s: reply to %s not delivered: %s", self.device.name, event.id, error
            )

    async def publish_event(self, event: DeviceEvent) -> None:
        """``Device.emit``: the event published to the gateway."""
        rpc = self._rpc
        if rpc is None:
            log.warning("simulated %s offline: event %s lost", self.device.name, event.type)
            return
        cloud_event = equipment_event(event, self.device.name, self.source, MSGPACK)
        try:
            await rpc.publish(cloud_event)
        except GatewayError as error:
            log.warning(
                "simulated %s: event %s not delivered: %s", self.device.name, event.type, error
            )


async def _first_of(*waits: Callable[[], Awaitable[None]]) -> None:
    """Return as soon as one of ``waits`` returns."""
    async with anyio.create_task_group() as tasks:

        async def wait(until: Callable[[], Awaitable[None]]) -> None:
            await until()
            tasks.cancel_scope.cancel()

        for until in waits:
            tasks.start_soon(wait, until)


# -- CloudEvents <-> device terms (shared by every transport's link) ---------------------------


def device_command(event: CloudEvent) -> DeviceCommand:
    """The command a CloudEvent carries, as devices see it."""
    return DeviceCommand(
        correlation_id=event.correlationid or event.id,
        type=event.type,
        data=event.data,
        scope=event.subject,
        job_order_id=event.extensions.get(JOB_ORDER_ATTRIBUTE),
    )


def reply_event(command: CloudEvent, answer: Answer, source: str) -> CloudEvent:
    """The reply to ``command``: the answer's data, or an error reply with its code (and what
    the device measured while failing, beside ``error`` and ``message``)."""
    if answer.error_code is not None:
        reply = command.error_reply(
            source=source, code=answer.error_code, message=answer.error_message or ""
        )
        if isinstance(answer.data, Mapping) and isinstance(reply.data, Mapping):
            reply = reply.replace(data={**answer.data, **reply.data})
        return reply
    return command.reply(source=source, data=answer.data)


def equipment_event(
    event: DeviceEvent, equipment: str, source: str, datacontenttype: str = JSON
) -> CloudEvent:
    """A device's event as the CloudEvent equipment sends (``equipment``, ``joborderid``)."""
    extensions = {EQUIPMENT_ATTRIBUTE: equipment}
    if event.job_order_id is not None:
        extensions[JOB_ORDER_ATTRIBUTE] = event.job_order_id
    return CloudEvent(
        type=event.type,
        source=source,
        subject=event.scope,
        time=utc_now(),
        datacontenttype=datacontenttype,
        data=event.data,
        extensions=extensions,
    )
