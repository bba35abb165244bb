"""The server side: the listener equipment connects to (plain TCP or TLS).

Each accepted connection becomes a ``Session`` that names its equipment with ``hello`` and is
closed after ``heartbeat_timeout_seconds`` of silence, or ``hello_timeout_seconds`` after it
opened if it has not named its equipment by then.

Connections are bounded: at most ``max_connections`` at once (one more closes the oldest
connection that has not named its equipment yet, or is itself closed when every connection
belongs to named equipment; said once per minute), kept below the process's open-file limit
with room for the gateway's own Redis and MQTT connections (``gateway.peers``). A process out
of files (EMFILE) cannot accept: the listener waits a moment and goes on, it never stops.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import anyio
from anyio.abc import (
    AnyByteStream,
    ByteStream,
    Listener,
    SocketAttribute,
    SocketListener,
    TaskGroup,
)
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSStream

from gateway.errors import SettingsError
from gateway.peers import LogOnce, connection_cap, is_resource_shortage
from gateway_msgpack_rpc.auth import DeviceAuth, certificate_names
from gateway_msgpack_rpc.sessions import Session, Sessions
from gateway_msgpack_rpc.settings import SECTION, is_loopback, server_tls_context

log = logging.getLogger(__name__)

# Connections over the cap while evicted ones are closing (their tasks see it a moment later);
# past this many, accepting waits for them.
EVICTING = 16


class RpcServer:
    """Listens on ``[msgpack_rpc] host:port`` (nothing when the port is 0)."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.settings = sessions.settings
        self._tls = server_tls_context(self.settings)
        self.address: tuple[str, int] | None = None  # where it listens, while it does
        self.max_connections = connection_cap(
            f"{SECTION}.max_connections", self.settings.max_connections
        )
        self.connections = 0  # open now
        self._sessions: dict[Session, None] = {}  # open ones, oldest first
        self._closed = anyio.Event()  # set (and made anew) when a connection has closed
        self.refused = 0  # closed at once, over max_connections
        self._refusals = LogOnce(log)

    async def listen(self) -> Listener[Any] | None:
        """Bind the port (``None`` when none is configured); ``SettingsError`` if it cannot."""
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
        self.address = (settings.host, settings.port)
        authenticator = self.sessions.authenticator
        if (authenticator is None or authenticator.mode is DeviceAuth.NONE) and not is_loopback(
            settings.host
        ):  # allowed by the settings' own check only when said explicitly
            log.warning(
                "MessagePack-RPC server on %s:%d believes any device's equipment id "
                "(%s.device_auth = none, allow_unauthenticated_devices = true)",
                settings.host,
                settings.port,
                SECTION,
            )
        log.info(
            "MessagePack-RPC server listening on %s:%d%s",
            settings.host,
            settings.port,
            " (TLS)" if self._tls is not None else "",
        )
        return listener

    async def serve(self, listener: Listener[Any], tasks: TaskGroup) -> None:
        """Serve each connection ``listener`` accepts in ``tasks`` until cancelled."""
        listeners = listener.listeners if isinstance(listener, MultiListener) else [listener]
        assert all(isinstance(one, SocketListener) for one in listeners)
        try:
            async with listener, anyio.create_task_group() as accepting:
                for one in listeners:
                    accepting.start_soon(self._accept, cast(SocketListener, one), tasks)
        finally:
            self.address = None

    async def _accept(self, listener: SocketListener, tasks: TaskGroup) -> None:
        pause = 0.05
        while True:
            try:
                stream = await listener.accept()
            except OSError as error:
                if not is_resource_shortage(error):
                    raise
                # Out of files: the connection waits in the backlog; try again shortly.
                self._refusals.report(
                    "accept", "MessagePack-RPC server cannot accept (%s); retrying", error
                )
                await anyio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            pause = 0.05
            if self.connections >= self.max_connections and self._evict_one():
                # The evicted connection closes once its task sees it: accept no more until
                # files come back (the next connections wait in the kernel's backlog).
                while self.connections >= self.max_connections + EVICTING:
                    await self._closed.wait()
            elif self.connections >= self.max_connections:
                self.refused += 1
                await anyio.aclose_forcefully(stream)
                self._refusals.report(
                    "full",
                    "MessagePack-RPC connection refused: %d connections open (%s.max_connections)",
                    self.max_connections,
                    SECTION,
                )
                continue
            self.connections += 1
            tasks.start_soon(self._serve_connection, stream)

    def _evict_one(self) -> bool:
        """Close the oldest connection that has not named its equipment (``False``: none)."""
        for session in self._sessions:
            if session.equipment_id is None and session.connection is not None:
                session.connection.close("too many connections, and this one never said hello")
                self._refusals.report(
                    "evict",
                    "MessagePack-RPC connections over %s.max_connections (%d): closing the "
                    "ones that did not say hello",
                    SECTION,
                    self.max_connections,
                )
                return True
        return False

    async def _serve_connection(self, stream: AnyByteStream) -> None:
        session: Session | None = None
        try:
            if self._tls is not None:
                wrapped = await self._handshake(stream)
                if wrapped is None:
                    return
                stream = wrapped
            names = certificate_names(stream)
            session = Session(self.sessions, peer_name(stream), certificate_names=names)
            self._sessions[session] = None
            log.debug("MessagePack-RPC connection from %s", session.peer)
            await self.sessions.serve(session, stream, watchdog=True)  # type: ignore[arg-type]
        finally:
            self.connections -= 1
            if session is not None:
                self._sessions.pop(session, None)
            self._closed.set()
            self._closed = anyio.Event()

    async def _handshake(self, stream: AnyByteStream) -> ByteStream | None:
        """The TLS stream, or ``None`` when the handshake failed: one warning, no traceback
        (any port scanner or misconfigured client causes one)."""
        assert self._tls is not None
        peer = peer_name(stream)
        try:
            with anyio.fail_after(self.settings.connect_timeout_seconds):
                return await TLSStream.wrap(
                    stream, server_side=True, ssl_context=self._tls, standard_compatible=False
                )
        except Exception as error:
            await anyio.aclose_forcefully(stream)
            self._refusals.report(
                f"tls {peer.rpartition(':')[0]}",
                "TLS handshake with %s failed: %s",
                peer,
                str(error) or type(error).__name__,
            )
            return None


def peer_name(stream: AnyByteStream) -> str:
    address = stream.extra(SocketAttribute.remote_address, None)
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address or "peer")
