"""The equipment side of the protocol, for simulated equipment, tests and integrators' tools.

- ``RpcDevice``: equipment that connects to the gateway's RPC server — says hello, sends
  heartbeats, receives ``command`` notifications, publishes replies and events.
- ``RpcEquipmentServer``: equipment that is itself an RPC server — the gateway connects to it
  and calls ``command``; the handler's return value is the call's result.

Both speak through ``RpcConnection``, so they follow the same framing and limits as the gateway.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.tls import TLSListener

from gateway.cloudevents import MSGPACK, CloudEvent
from gateway.equipment import JOB_ORDER_ATTRIBUTE
from gateway.errors import CloudEventError
from gateway_msgpack_rpc.codec import from_map, to_map
from gateway_msgpack_rpc.connection import Limits, RpcConnection
from gateway_msgpack_rpc.protocol import INVALID_CLOUDEVENT, RpcError, expect_params

log = logging.getLogger(__name__)

CommandHandler = Callable[[CloudEvent], Awaitable[None]]
"""Handles one command notification (``RpcDevice``); replies with ``device.reply``."""

CommandServer = Callable[[CloudEvent], Awaitable[Sequence[CloudEvent] | None]]
"""Handles one ``command`` call (``RpcEquipmentServer``); returns the events of its result."""


class RpcDevice:
    """A connected equipment; build it with ``RpcDevice.connect``."""

    def __init__(
        self,
        connection: RpcConnection,
        equipment_id: str,
        *,
        source: str | None = None,
        on_command: CommandHandler | None = None,
        token: str | None = None,
    ) -> None:
        self.connection = connection
        self.equipment_id = equipment_id
        self.token = token  # proves the equipment id, when the server asks for tokens
        self.source = source or f"urn:equipment:{equipment_id}"
        self.welcome: dict[str, Any] = {}  # what the gateway answered to hello
        self._on_command = on_command
        send, receive = anyio.create_memory_object_stream[CloudEvent](1000)
        self._queue: MemoryObjectSendStream[CloudEvent] = send
        self.commands: MemoryObjectReceiveStream[CloudEvent] = receive
        """Commands received, when no ``on_command`` handler is given."""
        connection.methods["command"] = self._command

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        host: str,
        port: int,
        equipment_id: str,
        *,
        source: str | None = None,
        on_command: CommandHandler | None = None,
        heartbeat_seconds: float | None = None,
        hello: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        limits: Limits | None = None,
        token: str | None = None,
    ) -> AsyncIterator[RpcDevice]:
        """Connect, say hello, and send heartbeats until the block ends.

        ``heartbeat_seconds``: ``None`` sends one every third of the gateway's heartbeat
        timeout (from the hello answer), ``0`` none at all. ``hello=False`` leaves the
        connection unidentified (for tests of the protocol itself). ``token``: the device's
        token, sent with hello (servers with ``device_auth = "token"``); with
        ``device_auth = "certificate"`` the certificate in ``ssl_context`` proves the id.
        A refused hello raises ``RpcError`` (``not-authorized``).
        """
        stream = await _open(host, port, ssl_context, tls_hostname)
        connection = RpcConnection(stream, name=f"gateway {host}:{port}", limits=limits)
        device = cls(connection, equipment_id, source=source, on_command=on_command, token=token)
        with _sole_exception():
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(connection.run)
                try:
                    if hello:
                        device.welcome = await device.hello()
                    interval = device._heartbeat_interval(heartbeat_seconds)
                    if interval:
                        tasks.start_soon(device._heartbeats, interval)
                    yield device
                finally:
                    connection.close("device disconnected")
                    tasks.cancel_scope.cancel()

    async def hello(self) -> dict[str, Any]:
        credential = () if self.token is None else (self.token,)
        welcome: dict[str, Any] = await self.connection.call(
            "hello", self.equipment_id, *credential
        )
        return welcome

    async def heartbeat(self) -> None:
        await self.connection.call("heartbeat", self.equipment_id)

    async def publish(self, event: CloudEvent) -> list[CloudEvent]:
        """Publish ``event``; returns the gateway's reply events (often none)."""
        replies = await self.connection.call("publish", to_map(event))
        return [from_map(reply) for reply in replies]

    async def reply(
        self,
        command: CloudEvent,
        data: Any = None,
        *,
        error: str | None = None,
        code: str = "equipment-error",
    ) -> list[CloudEvent]:
        """Answer ``command``: ``data`` on success, or ``error`` (with ``code``) on failure."""
        if error is not None:
            answer = command.error_reply(source=self.source, code=code, message=error)
        else:
            answer = command.reply(source=self.source, data=data)
        return await self.publish(answer)

    async def emit(
        self,
        type: str,
        data: Any = None,
        *,
        scope: str | None = None,
        job_order_id: str | None = None,
    ) -> list[CloudEvent]:
        """Report an event unasked (what a ``pull_event`` action waits for)."""
        extensions = {JOB_ORDER_ATTRIBUTE: job_order_id} if job_order_id else {}
        event = CloudEvent(
            type=type,
            source=self.source,
            subject=scope,
            datacontenttype=MSGPACK,
            data=data,
            extensions=extensions,
        )
        return await self.publish(event)

    async def abort(self) -> None:
        """Drop the connection at once, like equipment losing power mid-work."""
        await self.connection.abort("device aborted")

    async def wait_closed(self) -> None:
        """Return once the connection has ended (the gateway closed it, or it broke)."""
        await self.connection.wait_finished()

    async def _command(self, params: list[Any]) -> None:
        command = _event_param("command", params)
        if self._on_command is not None:
            await self._on_command(command)
        else:
            await self._queue.send(command)

    def _heartbeat_interval(self, heartbeat_seconds: float | None) -> float:
        if heartbeat_seconds is not None:
            return heartbeat_seconds
        return float(self.welcome.get("heartbeat_timeout_seconds") or 0) / 3

    async def _heartbeats(self, interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            try:
                await self.heartbeat()
            except Exception as error:  # the connection's end is reported by run()
                log.info("%s: heartbeat failed: %s", self.equipment_id, error)
                return


class RpcEquipmentServer:
    """Equipment that is an RPC server; build it with ``RpcEquipmentServer.serve``."""

    def __init__(self, on_command: CommandServer, *, limits: Limits | None = None) -> None:
        self.port = 0
        self.connections: list[RpcConnection] = []  # from the gateway, newest last
        self._on_command = on_command
        self._limits = limits

    @classmethod
    @asynccontextmanager
    async def serve(
        cls,
        on_command: CommandServer,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
    ) -> AsyncIterator[RpcEquipmentServer]:
        """Listen (``port`` 0: a free one, see ``.port``) until the block ends."""
        server = cls(on_command, limits=limits)
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        server.port = listener.extra(SocketAttribute.local_port)
        serving: Any = listener
        if ssl_context is not None:
            serving = TLSListener(listener, ssl_context, standard_compatible=False)
        async with serving, anyio.create_task_group() as tasks:
            tasks.start_soon(serving.serve, server._serve_connection, tasks)
            try:
                yield server
            finally:
                tasks.cancel_scope.cancel()

    async def publish(self, event: CloudEvent) -> list[CloudEvent]:
        """Publish ``event`` to the gateway over its newest connection."""
        replies = await self.connections[-1].call("publish", to_map(event))
        return [from_map(reply) for reply in replies]

    async def abort_connections(self) -> None:
        """Drop every connection at once, like equipment losing power mid-command."""
        for connection in list(self.connections):
            await connection.abort("equipment aborted")

    async def _serve_connection(self, stream: ByteStream) -> None:
        connection = RpcConnection(stream, name="gateway", limits=self._limits)
        connection.methods["command"] = self._command
        self.connections.append(connection)
        try:
            await connection.run()
        finally:
            self.connections.remove(connection)

    async def _command(self, params: list[Any]) -> list[dict[str, Any]]:
        command = _event_param("command", params)
        events = await self._on_command(command)
        return [to_map(event) for event in events or ()]


@contextmanager
def _sole_exception() -> Iterator[None]:
    """Raise a task group's only exception as itself, so callers can catch it by type."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


def _event_param(method: str, params: list[Any]) -> CloudEvent:
    expect_params(method, params, "event")
    try:
        return from_map(params[0])
    except CloudEventError as error:
        raise RpcError(INVALID_CLOUDEVENT, f"invalid CloudEvent: {error}") from None


async def _open(
    host: str, port: int, ssl_context: ssl.SSLContext | None, tls_hostname: str | None
) -> ByteStream:
    if ssl_context is None:
        return await anyio.connect_tcp(host, port)
    return await anyio.connect_tcp(
        host,
        port,
        ssl_context=ssl_context,
        tls_hostname=tls_hostname,
        tls_standard_compatible=False,
    )
