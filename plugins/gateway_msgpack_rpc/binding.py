"""The MessagePack-RPC binding: a server for equipment, and connections to equipment servers.

Both kinds of connection are *sessions* of one equipment and offer the same methods (``hello``,
``heartbeat``, ``publish``), so equipment that is itself an RPC server may also publish over the
connection the gateway opened. What arrives is handled in one place, ``receive``: a reply that a
``request`` on this instance waits for goes to it, everything else to the dispatcher on
``<topic_prefix>/<equipment id>/publish`` (where the equipment processor, or any other processor
registered for this binding, takes it). The gateway's way to the equipment is ``publish``: a
``command`` notification to connected equipment, a ``command`` call to equipment servers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import AnyByteStream, ByteStream, Listener, SocketAttribute, TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream
from anyio.streams.tls import TLSListener

from gateway.cloudevents import CloudEvent
from gateway.equipment import EQUIPMENT_ATTRIBUTE
from gateway.errors import CloudEventError, GatewayError, SettingsError
from gateway.transport import Dispatcher
from gateway_msgpack_rpc.codec import from_map, to_map
from gateway_msgpack_rpc.connection import Limits, PendingCall, RpcConnection
from gateway_msgpack_rpc.forwarding import Forwarding
from gateway_msgpack_rpc.liveness import Liveness
from gateway_msgpack_rpc.protocol import (
    INVALID_CLOUDEVENT,
    INVALID_PARAMS,
    NOT_IDENTIFIED,
    RpcConnectionClosed,
    RpcError,
    expect_params,
)
from gateway_msgpack_rpc.settings import (
    SECTION,
    MsgpackRpcSettings,
    RemoteEquipment,
    client_tls_context,
    equipment_id_problem,
    remote_equipment,
    server_tls_context,
)

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

BINDING = "msgpack-rpc"


class EquipmentOffline(GatewayError):
    """A command for equipment that has no RPC connection to this instance."""


class MsgpackRpcBinding:
    name = BINDING

    def __init__(self, settings: MsgpackRpcSettings, *, source: str) -> None:
        self.settings = settings
        self.source = source
        self.liveness = Liveness(ttl_seconds=settings.heartbeat_timeout_seconds)
        self.remote = {entry.equipment_id: entry for entry in remote_equipment(settings)}
        self.known = _known_equipment(settings)
        self._server_tls = server_tls_context(settings)
        self._client_tls = (
            client_tls_context(settings) if any(r.tls for r in self.remote.values()) else None
        )
        self._limits = Limits(
            max_request_bytes=settings.max_request_bytes,
            max_skip_bytes=settings.max_skip_bytes,
            max_concurrent_requests=settings.max_concurrent_requests,
            send_timeout_seconds=settings.send_timeout_seconds,
        )
        self._connections: dict[str, RpcConnection] = {}  # equipment id -> its live connection
        self._open: set[RpcConnection] = set()  # every connection, identified or not
        self._pending: dict[str, MemoryObjectSendStream[CloudEvent]] = {}
        self._gateway: Gateway | None = None
        self._tasks: TaskGroup | None = None
        self.address: tuple[str, int] | None = None  # where the server listens, while it does
        self._serving = False

    # -- what equipment there is -------------------------------------------------------------

    def knows(self, equipment_id: str) -> bool:
        """Configured, listed as known, or seen since start: commands for it are ours."""
        return (
            equipment_id in self.remote
            or equipment_id in self.known
            or self.liveness.status(equipment_id) is not None
        )

    def is_connected(self, equipment_id: str) -> bool:
        return equipment_id in self._connections

    def _connection_for(self, equipment_id: str) -> RpcConnection:
        connection = self._connections.get(equipment_id)
        if connection is not None:
            return connection
        status = self.liveness.status(equipment_id)
        why = f"disconnected ({status.reason})" if status is not None else "never connected"
        raise EquipmentOffline(f"equipment {equipment_id} offline: MessagePack-RPC {why}")

    # -- running -----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Serving: the server listens (when configured). Equipment being offline does not make
        the gateway unready; liveness reports it."""
        return self._serving

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self._gateway = gateway
        self.liveness.attach(gateway.equipment, owners=gateway.state.find(Forwarding))
        listener = await self._listen()
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            accepting = anyio.CancelScope()
            if listener is not None:
                tasks.start_soon(self._accept, listener, tasks, accepting)
            for remote in self.remote.values():
                tasks.start_soon(self._keep_connected, remote, gateway)
            task_status.started()
            self._serving = True
            await gateway.closing.wait()
            self._serving = False
            accepting.cancel()
            for connection in list(self._open):
                connection.close("gateway stopping")
        self._tasks = None
        log.info("MessagePack-RPC binding stopped")

    async def _listen(self) -> Listener[Any] | None:
        settings = self.settings
        if not settings.port:
            return None
        try:
            listener: Listener[Any] = await anyio.create_tcp_listener(
                local_host=settings.host, local_port=settings.port
            )
        except OSError as error:
            raise SettingsError(
                f"{SECTION}.port", f"cannot listen on {settings.host}:{settings.port}: {error}"
            ) from None
        if self._server_tls is not None:
            listener = _TlsListener(
                listener,
                self._server_tls,
                standard_compatible=False,
                handshake_timeout=settings.connect_timeout_seconds,
            )
        self.address = (settings.host, settings.port)
        log.info(
            "MessagePack-RPC server listening on %s:%d%s",
            settings.host,
            settings.port,
            " (TLS)" if self._server_tls is not None else "",
        )
        return listener

    async def _accept(
        self, listener: Listener[Any], tasks: TaskGroup, accepting: anyio.CancelScope
    ) -> None:
        try:
            with accepting:
                async with listener:
                    await listener.serve(self._serve_connection, tasks)
        finally:
            self.address = None

    async def _serve_connection(self, stream: ByteStream) -> None:
        session = _Session(self, _peer_name(stream))
        log.info("MessagePack-RPC connection from %s", session.peer)
        await self._run_session(session, stream)

    async def _run_session(self, session: _Session, stream: ByteStream) -> None:
        connection = RpcConnection(
            stream,
            name=session.peer,
            methods=session.methods(),
            limits=self._limits,
            on_error=session.report,
        )
        session.connection = connection
        self._open.add(connection)
        if self._closing():
            connection.close("gateway stopping")  # accepted just as the gateway stopped
        try:
            if session.equipment_id is not None:
                await self.attach(session)
            async with anyio.create_task_group() as watch:
                if session.remote is None and self.settings.heartbeat_timeout_seconds:
                    watch.start_soon(self._watchdog, connection)
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

    async def _watchdog(self, connection: RpcConnection) -> None:
        """Close a connection that stays silent: equipment that lost power sends no FIN."""
        timeout = self.settings.heartbeat_timeout_seconds
        while True:
            idle = anyio.current_time() - connection.last_received
            if idle >= timeout:
                connection.close(f"nothing received for {timeout:g} s (no heartbeat)")
                return
            await anyio.sleep(timeout - idle)

    async def _keep_alive(self, session: _Session) -> None:
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

    async def attach(self, session: _Session) -> None:
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

    async def _detach(self, session: _Session) -> None:
        connection = session.connection
        assert connection is not None
        reason = connection.close_reason or "closed"
        log.info("MessagePack-RPC connection %s closed: %s", session.peer, reason)
        equipment_id = session.equipment_id
        if equipment_id is not None and self._connections.get(equipment_id) is connection:
            del self._connections[equipment_id]
            await self.liveness.mark_gone(equipment_id, reason)

    # -- client side: equipment that is an RPC server ---------------------------------------

    async def _keep_connected(self, remote: RemoteEquipment, gateway: Gateway) -> None:
        """Connect to an equipment server, and again whenever the connection ends."""
        delay = self.settings.reconnect_min_seconds
        failing = False
        while not self._closing():
            stream = await self._connect(remote, quiet=failing)
            failing = stream is None
            if stream is not None:
                delay = self.settings.reconnect_min_seconds
                await self._run_session(_Session(self, _address(remote), remote), stream)
            with anyio.move_on_after(delay):
                await gateway.closing.wait()
            delay = min(delay * 2 or 0.1, self.settings.reconnect_max_seconds)

    async def _connect(self, remote: RemoteEquipment, *, quiet: bool) -> ByteStream | None:
        address = _address(remote)
        try:
            with anyio.fail_after(self.settings.connect_timeout_seconds):
                if remote.tls:
                    assert self._client_tls is not None
                    return await anyio.connect_tcp(
                        remote.host,
                        remote.port,
                        ssl_context=self._client_tls,
                        tls_standard_compatible=False,
                    )
                return await anyio.connect_tcp(remote.host, remote.port)
        except (OSError, TimeoutError, anyio.BrokenResourceError) as error:
            level = logging.DEBUG if quiet else logging.WARNING
            log.log(
                level,
                "equipment %s at %s: cannot connect (%s)",
                remote.equipment_id,
                address,
                error or type(error).__name__,
            )
            return None

    # -- events in ---------------------------------------------------------------------------

    async def receive(self, equipment_id: str, event: CloudEvent) -> list[CloudEvent]:
        """An event from equipment (published, or in a command's result); returns the replies.

        A reply a ``request`` of this instance waits for goes to it; anything else is
        dispatched, marked with the sender's id in the ``equipment`` extension (the connection
        says who sent it, whatever the event claims).
        """
        waiting = self._pending.get(event.correlationid or "")
        if waiting is not None:
            try:
                waiting.send_nowait(event)
            except anyio.WouldBlock:
                log.info("second reply for correlation %s ignored", event.correlationid)
            return []
        extensions = {**event.extensions, EQUIPMENT_ATTRIBUTE: equipment_id}
        topic = f"{self.settings.topic_prefix}/{equipment_id}/publish"
        return await self._dispatcher().dispatch(
            event.replace(extensions=extensions), binding=self.name, topic=topic
        )

    def report(self, where: str, code: str, message: str) -> None:
        """Log and count a malformed frame or failed request (the host's failure observers)."""
        topic = f"{self.settings.topic_prefix}/{where}"
        if self._gateway is None:
            log.warning("rejected message on %s %s: %s: %s", self.name, topic, code, message)
            return
        self._gateway.dispatcher.reject(binding=self.name, topic=topic, code=code, error=message)

    def _closing(self) -> bool:
        return self._gateway is not None and self._gateway.closing.is_set()

    def _dispatcher(self) -> Dispatcher:
        if self._gateway is None:
            raise GatewayError("the MessagePack-RPC binding is not running")
        return self._gateway.dispatcher

    # -- events out --------------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        event: CloudEvent,
        *,
        retain: bool = False,
        qos: int = 1,
        response_topic: str | None = None,  # replies come back on the same connection
    ) -> None:
        """Send ``event`` as a ``command`` to the equipment whose id is ``topic``.

        Returns once the frame is written (``retain`` and ``qos`` do not apply). To equipment
        that is an RPC server it is a call, whose result is received in the background
        (``receive``); to connected equipment a notification, answered by a ``publish``.
        Raises ``EquipmentOffline`` when the equipment is not connected and
        ``RpcConnectionClosed`` when the frame could not be written: the caller's retry
        decides, nothing is re-sent here.
        """
        connection = self._connection_for(topic)
        encoded = to_map(event)
        if topic not in self.remote:
            await connection.notify("command", encoded)
            return
        if self._tasks is None:
            raise GatewayError("the MessagePack-RPC binding is not running")
        pending = await connection.start_call("command", encoded)
        self._tasks.start_soon(self._collect, topic, event, connection, pending)

    async def request(self, topic: str, event: CloudEvent, *, timeout: float) -> CloudEvent:
        """Send ``event`` to equipment ``topic`` and wait for the event answering it."""
        correlation = event.correlationid or event.id
        if correlation in self._pending:
            raise GatewayError(f"a request with correlation {correlation!r} is already waiting")
        event = event.replace(correlationid=correlation)
        send, replies = anyio.create_memory_object_stream[CloudEvent](1)
        self._pending[correlation] = send
        try:
            await self.publish(topic, event)
            with anyio.fail_after(timeout):
                return await replies.receive()
        except TimeoutError:
            raise GatewayError(
                f"no reply to {event.type} from {topic} within {timeout} s"
            ) from None
        finally:
            del self._pending[correlation]
            send.close()
            replies.close()

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
                await self.receive(equipment_id, event)
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
            reply = command.error_reply(source=self.source, code=error.code, message=error.message)
            return [reply]
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
            self.report(equipment_id, INVALID_CLOUDEVENT, message)
            return []
        events = []
        for index, item in enumerate(result):
            try:
                events.append(from_map(item))
            except CloudEventError as error:
                self.report(equipment_id, INVALID_CLOUDEVENT, f"command result[{index}]: {error}")
        return events


class _TlsListener(TLSListener):
    """anyio's TLS listener, logging a failed handshake as one warning instead of a traceback
    (any port scanner or misconfigured client causes one)."""

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: AnyByteStream) -> None:
        peer = _peer_name(stream)
        await anyio.aclose_forcefully(stream)
        if not isinstance(exc, Exception) or isinstance(exc, anyio.get_cancelled_exc_class()):
            raise exc
        log.warning("TLS handshake with %s failed: %s", peer, str(exc) or type(exc).__name__)


class _Session:
    """One connection's side of the protocol: which equipment it is, and its methods."""

    def __init__(
        self, binding: MsgpackRpcBinding, peer: str, remote: RemoteEquipment | None = None
    ) -> None:
        self.binding = binding
        self.peer = peer
        self.remote = remote  # set: the gateway connected to this equipment's server
        self.equipment_id: str | None = remote.equipment_id if remote is not None else None
        self.connection: RpcConnection | None = None

    def methods(self) -> dict[str, Any]:
        return {"hello": self.hello, "heartbeat": self.heartbeat, "publish": self.publish}

    async def hello(self, params: list[Any]) -> dict[str, Any]:
        expect_params("hello", params, "equipment_id")
        await self._identify(params[0])
        settings = self.binding.settings
        return {
            "equipment": self.equipment_id,
            "gateway": self.binding.source,
            "heartbeat_timeout_seconds": settings.heartbeat_timeout_seconds,
            "max_request_bytes": settings.max_request_bytes,
        }

    async def heartbeat(self, params: list[Any]) -> bool:
        expect_params("heartbeat", params, "equipment_id")
        await self._identify(params[0])
        return True

    async def publish(self, params: list[Any]) -> list[dict[str, Any]]:
        expect_params("publish", params, "event")
        if self.equipment_id is None:
            raise RpcError(NOT_IDENTIFIED, "call hello(equipment_id) before publish")
        try:
            event = from_map(params[0])
        except CloudEventError as error:
            raise RpcError(INVALID_CLOUDEVENT, f"invalid CloudEvent: {error}") from None
        await self.binding.liveness.mark_seen(self.equipment_id)
        replies = await self.binding.receive(self.equipment_id, event)
        return [to_map(reply) for reply in replies]

    async def _identify(self, equipment_id: Any) -> None:
        """The first hello or heartbeat names the equipment; later ones must repeat the name."""
        problem = equipment_id_problem(equipment_id)
        if problem is not None:
            raise RpcError(INVALID_PARAMS, problem)
        if self.equipment_id is None:
            self.equipment_id = equipment_id
            log.info("MessagePack-RPC connection %s is equipment %s", self.peer, equipment_id)
            await self.binding.attach(self)
        elif equipment_id != self.equipment_id:
            raise RpcError(
                INVALID_PARAMS,
                f"this connection is equipment {self.equipment_id!r}, not {equipment_id!r}",
            )
        else:
            await self.binding.liveness.mark_seen(equipment_id)

    def report(self, code: str, message: str) -> None:
        self.binding.report(self.equipment_id or self.peer, code, message)


def _known_equipment(settings: MsgpackRpcSettings) -> frozenset[str]:
    for equipment_id in settings.known_equipment:
        problem = equipment_id_problem(equipment_id)
        if problem is not None:
            raise SettingsError(f"{SECTION}.known_equipment", problem)
    return frozenset(settings.known_equipment)


def _peer_name(stream: AnyByteStream) -> str:
    address = stream.extra(SocketAttribute.remote_address, None)
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address or "peer")


def _address(remote: RemoteEquipment) -> str:
    return f"{'tls://' if remote.tls else ''}{remote.host}:{remote.port}"
