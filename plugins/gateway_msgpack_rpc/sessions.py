"""Sessions: which RPC connection is which equipment's, whichever side opened it.

A connection equipment opened to the server and one the gateway opened to an equipment server
are served the same way: ``Session`` is one connection's side of the protocol (``hello``,
``heartbeat``, ``publish``; which equipment it is), ``Sessions`` the registry of the live
connection of each equipment (newest wins), which also keeps each one's equipment online while it
is open and closes silent ones.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import ByteStream

from gateway.cloudevents import CloudEvent
from gateway.errors import CloudEventError, GatewayError
from gateway_msgpack_rpc.auth import DeviceAuthenticator
from gateway_msgpack_rpc.codec import from_map, to_map
from gateway_msgpack_rpc.connection import Limits, RpcConnection
from gateway_msgpack_rpc.liveness import Liveness
from gateway_msgpack_rpc.protocol import (
    INVALID_CLOUDEVENT,
    INVALID_PARAMS,
    NOT_AUTHORIZED,
    NOT_IDENTIFIED,
    RpcError,
    expect_params,
)
from gateway_msgpack_rpc.settings import MsgpackRpcSettings, RemoteEquipment, equipment_id_problem

log = logging.getLogger(__name__)

Receive = Callable[[str, CloudEvent], Awaitable[list[CloudEvent]]]
"""Takes an event from equipment ``(equipment id, event)``; returns the replies to send back."""

Report = Callable[[str, str, str], None]
"""Told ``(where, code, message)`` of a malformed frame or failed request."""


class EquipmentOffline(GatewayError):
    """A command for equipment that has no RPC connection to this instance."""


class Sessions:
    """The live connection of each equipment on this instance, and how a connection is served.

    ``receive`` takes what equipment publishes, ``report`` what it sends wrong; ``source`` is
    the gateway's CloudEvents source, told to equipment in the ``hello`` answer;
    ``authenticator`` checks the credential of a device that names its equipment.
    """

    def __init__(
        self,
        settings: MsgpackRpcSettings,
        liveness: Liveness,
        *,
        source: str,
        receive: Receive,
        report: Report,
        authenticator: DeviceAuthenticator | None = None,
    ) -> None:
        self.settings = settings
        self.authenticator = authenticator
        self.liveness = liveness
        self.source = source
        self.receive = receive
        self.report = report
        self.limits = Limits(
            max_request_bytes=settings.max_request_bytes,
            max_skip_bytes=settings.max_skip_bytes,
            max_concurrent_requests=settings.max_concurrent_requests,
            send_timeout_seconds=settings.send_timeout_seconds,
        )
        self.stopping = False  # set by ``close_all``: connections that arrive now are closed
        # The other driver that serves an equipment id, if one does (set by the binding): such
        # an id is not taken over by a device naming it here.
        self.served_elsewhere: Callable[[str], str | None] = lambda equipment_id: None
        self._connections: dict[str, RpcConnection] = {}  # equipment id -> its live connection
        self._open: set[RpcConnection] = set()  # every connection, identified or not

    def is_connected(self, equipment_id: str) -> bool:
        return equipment_id in self._connections

    def connection_for(self, equipment_id: str) -> RpcConnection:
        """The equipment's live connection; ``EquipmentOffline`` saying why there is none."""
        connection = self._connections.get(equipment_id)
        if connection is not None:
            return connection
        status = self.liveness.status(equipment_id)
        why = f"disconnected ({status.reason})" if status is not None else "never connected"
        raise EquipmentOffline(f"equipment {equipment_id} offline: MessagePack-RPC {why}")

    def close_all(self, reason: str) -> None:
        """Close every connection, and any that is still being accepted."""
        self.stopping = True
        for connection in list(self._open):
            connection.close(reason)

    async def serve(self, session: Session, stream: ByteStream, *, watchdog: bool) -> None:
        """Serve ``session`` over ``stream`` until the connection ends; never raises.

        ``watchdog``: close the connection after ``heartbeat_timeout_seconds`` of silence
        (equipment that connects sends heartbeats; equipment servers do not).
        """
        connection = RpcConnection(
            stream,
            name=session.peer,
            methods=session.methods(),
            limits=self.limits,
            on_error=session.report,
        )
        session.connection = connection
        self._open.add(connection)
        if self.stopping:
            connection.close("gateway stopping")  # accepted just as the gateway stopped
        try:
            if session.equipment_id is not None:
                await self.attach(session)
            async with anyio.create_task_group() as watch:
                if watchdog and self.settings.heartbeat_timeout_seconds:
                    watch.start_soon(self._watchdog, connection)
                if watchdog:
                    watch.start_soon(self._hello_deadline, session)
                watch.start_soon(self._keep_alive, session)
                await connection.run()
                watch.cancel_scope.cancel()
        except Exception:  # one connection's failure must not stop the binding
            log.exception("MessagePack-RPC connection %s failed", session.peer)
            connection.close("failed")
        finally:
            self._open.discard(connection)
            with anyio.CancelScope(shield=True):
                await self._detach(session)

    async def attach(self, session: Session) -> None:
        """``session`` is now its equipment's connection; a previous one is closed (newest wins:
        equipment that reconnects after losing power leaves a half-open connection behind)."""
        equipment_id, connection = session.equipment_id, session.connection
        assert equipment_id is not None
        assert connection is not None
        previous = self._connections.get(equipment_id)
        if previous is not None and previous is not connection:
            log.warning(
                "equipment %s connected again from %s: closing its connection %s",
                equipment_id,
                session.peer,
                previous.name,
            )
            previous.close(f"replaced by a new connection from {session.peer}")
        self._connections[equipment_id] = connection
        await self.liveness.mark_seen(equipment_id)

    async def _detach(self, session: Session) -> None:
        connection = session.connection
        assert connection is not None
        reason = connection.close_reason or "closed"
        equipment_id = session.equipment_id
        # Only equipment's connections are news; anonymous ones closing (a scanner, a flood
        # of idle connections) would flood the log.
        log.log(
            logging.INFO if equipment_id is not None else logging.DEBUG,
            "MessagePack-RPC connection %s closed: %s",
            session.peer,
            reason,
        )
        if equipment_id is not None and self._connections.get(equipment_id) is connection:
            del self._connections[equipment_id]
            await self.liveness.mark_gone(equipment_id, reason)

    async def _watchdog(self, connection: RpcConnection) -> None:
        """Close a connection that stays silent: equipment that lost power sends no FIN."""
        timeout = self.settings.heartbeat_timeout_seconds
        while True:
            idle = anyio.current_time() - connection.last_received
            if idle >= timeout:
                connection.close(f"nothing received for {timeout:g} s (no heartbeat)")
                return
            await anyio.sleep(timeout - idle)

    async def _hello_deadline(self, session: Session) -> None:
        """Close a connection that does not name its equipment in time: only equipment that
        proves who it is may keep a connection (and one of the server's files)."""
        timeout = self.settings.hello_timeout_seconds
        await anyio.sleep(timeout)
        if session.equipment_id is None and session.connection is not None:
            session.connection.close(f"no hello within {timeout:g} s")

    async def _keep_alive(self, session: Session) -> None:
        """Renew the liveness of the connection's equipment while it is open: an open connection
        is equipment that is there (the watchdog closes silent ones; equipment servers send no
        heartbeats), and the renewals stop if this instance dies with the connection."""
        while True:
            await anyio.sleep(self.liveness.refresh_seconds)
            equipment_id, connection = session.equipment_id, session.connection
            if equipment_id is None or connection is None:
                continue  # not identified yet
            if self._connections.get(equipment_id) is connection:  # not replaced meanwhile
                await self.liveness.mark_seen(equipment_id)


class Session:
    """One connection's side of the protocol: which equipment it is, and its methods.

    ``remote`` set: the gateway connected to this equipment's server, so it is identified
    from the start; otherwise equipment connected and names itself with ``hello``, proving it
    as the authenticator asks (a token, or ``certificate_names``: the names in its verified TLS
    client certificate).
    """

    def __init__(
        self,
        sessions: Sessions,
        peer: str,
        remote: RemoteEquipment | None = None,
        *,
        certificate_names: frozenset[str] = frozenset(),
    ) -> None:
        self.sessions = sessions
        self.peer = peer
        self.remote = remote
        self.certificate_names = certificate_names
        self.equipment_id: str | None = remote.equipment_id if remote is not None else None
        self.connection: RpcConnection | None = None

    def methods(self) -> dict[str, Any]:
        return {"hello": self.hello, "heartbeat": self.heartbeat, "publish": self.publish}

    async def hello(self, params: list[Any]) -> dict[str, Any]:
        await self._identify(*_identity_params("hello", params))
        settings = self.sessions.settings
        return {
            "equipment": self.equipment_id,
            "gateway": self.sessions.source,
            "heartbeat_timeout_seconds": settings.heartbeat_timeout_seconds,
            "max_request_bytes": settings.max_request_bytes,
        }

    async def heartbeat(self, params: list[Any]) -> bool:
        await self._identify(*_identity_params("heartbeat", params))
        return True

    async def publish(self, params: list[Any]) -> list[dict[str, Any]]:
        expect_params("publish", params, "event")
        if self.equipment_id is None:
            raise RpcError(NOT_IDENTIFIED, "call hello(equipment_id) before publish")
        try:
            event = from_map(params[0])
        except CloudEventError as error:
            raise RpcError(INVALID_CLOUDEVENT, f"invalid CloudEvent: {error}") from None
        await self.sessions.liveness.mark_seen(self.equipment_id)
        replies = await self.sessions.receive(self.equipment_id, event)
        return [to_map(reply) for reply in replies]

    async def _identify(self, equipment_id: Any, token: Any = None) -> None:
        """The first hello or heartbeat names the equipment (with its credential); later ones
        must repeat the name. A refused credential closes the connection after the answer."""
        problem = equipment_id_problem(equipment_id)
        if problem is not None:
            raise RpcError(INVALID_PARAMS, problem)
        if self.equipment_id is None:
            authenticator = self.sessions.authenticator
            if authenticator is not None and self.remote is None:
                try:
                    authenticator.check(equipment_id, token, self.certificate_names, self.peer)
                except RpcError:
                    if self.connection is not None:
                        self.connection.close("not authorized")
                    raise
            other = self.sessions.served_elsewhere(equipment_id)
            if other is not None:
                if self.connection is not None:
                    self.connection.close("equipment id served by another driver")
                raise RpcError(
                    NOT_AUTHORIZED,
                    f"equipment {equipment_id!r} is served by the {other} driver: its commands "
                    "never go over MessagePack-RPC",
                )
            self.equipment_id = equipment_id
            log.info("MessagePack-RPC connection %s is equipment %s", self.peer, equipment_id)
            await self.sessions.attach(self)
        elif equipment_id != self.equipment_id:
            raise RpcError(
                INVALID_PARAMS,
                f"this connection is equipment {self.equipment_id!r}, not {equipment_id!r}",
            )
        else:
            await self.sessions.liveness.mark_seen(equipment_id)

    def report(self, code: str, message: str) -> None:
        self.sessions.report(self.equipment_id or self.peer, code, message)


def _identity_params(method: str, params: list[Any]) -> tuple[Any, Any]:
    """``(equipment_id)`` or ``(equipment_id, token)``."""
    if len(params) not in (1, 2):
        raise RpcError(
            INVALID_PARAMS,
            f"{method} takes 1 or 2 params (equipment_id[, token]), got {len(params)}",
        )
    return params[0], params[1] if len(params) == 2 else None
