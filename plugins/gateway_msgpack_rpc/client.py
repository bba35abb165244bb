"""The client side: connections to equipment that is itself an RPC server, and its commands.

The gateway connects to every ``[msgpack_rpc] equipment`` entry and again whenever the
connection ends (exponential backoff). A command is a ``command`` call; its result (the reply
and any events) is collected in the background and handed on like a ``publish``.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup

from gateway.cloudevents import CloudEvent
from gateway.errors import CloudEventError, GatewayError
from gateway_msgpack_rpc.codec import from_map, to_map
from gateway_msgpack_rpc.connection import PendingCall, RpcConnection
from gateway_msgpack_rpc.protocol import INVALID_CLOUDEVENT, RpcConnectionClosed, RpcError
from gateway_msgpack_rpc.sessions import Session, Sessions
from gateway_msgpack_rpc.settings import RemoteEquipment, client_tls_context, remote_equipment

log = logging.getLogger(__name__)


class RpcClient:
    """Keeps a connection to each configured equipment server and calls its ``command``."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.settings = settings = sessions.settings
        self.remote = {entry.equipment_id: entry for entry in remote_equipment(settings)}
        tls = any(remote.tls for remote in self.remote.values())
        self._tls = client_tls_context(settings) if tls else None
        self._tasks: TaskGroup | None = None  # where command results are collected

    def start(self, tasks: TaskGroup, closing: anyio.Event) -> None:
        """Connect to every equipment server in ``tasks`` until ``closing`` is set."""
        self._tasks = tasks
        for remote in self.remote.values():
            tasks.start_soon(self._keep_connected, remote, closing)

    def stop(self) -> None:
        self._tasks = None

    async def command(
        self, equipment_id: str, event: CloudEvent, connection: RpcConnection
    ) -> None:
        """Call ``command`` on the equipment; returns once the frame is written, the result is
        handed on in the background."""
        if self._tasks is None:
            raise GatewayError("the MessagePack-RPC binding is not running")
        pending = await connection.start_call("command", to_map(event))
        self._tasks.start_soon(self._collect, equipment_id, event, connection, pending)

    # -- connecting ------------------------------------------------------------------------

    async def _keep_connected(self, remote: RemoteEquipment, closing: anyio.Event) -> None:
        """Connect to an equipment server, and again whenever the connection ends."""
        delay = self.settings.reconnect_min_seconds
        failing = False
        while not closing.is_set():
            stream = await self._connect(remote, quiet=failing)
            failing = stream is None
            if stream is not None:
                delay = self.settings.reconnect_min_seconds
                session = Session(self.sessions, address(remote), remote)
                await self.sessions.serve(session, stream, watchdog=False)
            with anyio.move_on_after(delay):
                await closing.wait()
            delay = min(delay * 2 or 0.1, self.settings.reconnect_max_seconds)

    async def _connect(self, remote: RemoteEquipment, *, quiet: bool) -> ByteStream | None:
        try:
            with anyio.fail_after(self.settings.connect_timeout_seconds):
                if remote.tls:
                    assert self._tls is not None
                    return await anyio.connect_tcp(
                        remote.host,
                        remote.port,
                        ssl_context=self._tls,
                        tls_standard_compatible=False,
                    )
                return await anyio.connect_tcp(remote.host, remote.port)
        except (OSError, TimeoutError, anyio.BrokenResourceError) as error:
            level = logging.DEBUG if quiet else logging.WARNING
            log.log(
                level,
                "equipment %s at %s: cannot connect (%s)",
                remote.equipment_id,
                address(remote),
                error or type(error).__name__,
            )
            return None

    # -- command results -------------------------------------------------------------------

    async def _collect(
        self,
        equipment_id: str,
        command: CloudEvent,
        connection: RpcConnection,
        pending: PendingCall,
    ) -> None:
        """Hand the result of a ``command`` call on as received events. Never raises: it runs
        in the binding's task group."""
        try:
            events = await self._command_result(equipment_id, command, connection, pending)
            for event in events:
                await self.sessions.receive(equipment_id, event)
        except Exception:
            log.exception(
                "equipment %s: the result of %s was not handled", equipment_id, command.id
            )

    async def _command_result(
        self,
        equipment_id: str,
        command: CloudEvent,
        connection: RpcConnection,
        pending: PendingCall,
    ) -> list[CloudEvent]:
        try:
            result = await connection.wait(pending, self.settings.call_timeout_seconds)
        except RpcError as error:  # the equipment refused or failed the command: its answer
            source = self.sessions.source
            return [command.error_reply(source=source, code=error.code, message=error.message)]
        except (RpcConnectionClosed, TimeoutError) as error:
            # No answer, and none invented: the engine's timeout and retry policy decide.
            log.warning(
                "equipment %s: command %s got no answer (%s)",
                equipment_id,
                command.correlationid,
                error or f"none within {self.settings.call_timeout_seconds:g} s",
            )
            return []
        return self._result_events(equipment_id, result)

    def _result_events(self, equipment_id: str, result: Any) -> list[CloudEvent]:
        """The events in a ``command`` result: ``nil`` or an array of CloudEvent maps."""
        if result is None:
            return []
        if not isinstance(result, list):
            message = f"command result must be an array of events, got {type(result).__name__}"
            self.sessions.report(equipment_id, INVALID_CLOUDEVENT, message)
            return []
        events = []
        for index, item in enumerate(result):
            try:
                events.append(from_map(item))
            except CloudEventError as error:
                message = f"command result[{index}]: {error}"
                self.sessions.report(equipment_id, INVALID_CLOUDEVENT, message)
        return events


def address(remote: RemoteEquipment) -> str:
    return f"{'tls://' if remote.tls else ''}{remote.host}:{remote.port}"
