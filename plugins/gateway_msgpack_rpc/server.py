"""The server side: the listener equipment connects to (plain TCP or TLS).

Each accepted connection becomes a ``Session`` that names its equipment with ``hello`` and is
closed after ``heartbeat_timeout_seconds`` of silence.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from anyio.abc import AnyByteStream, ByteStream, Listener, SocketAttribute, TaskGroup
from anyio.streams.tls import TLSListener

from gateway.errors import SettingsError
from gateway_msgpack_rpc.auth import DeviceAuth, certificate_names
from gateway_msgpack_rpc.sessions import Session, Sessions
from gateway_msgpack_rpc.settings import SECTION, server_tls_context

log = logging.getLogger(__name__)


class RpcServer:
    """Listens on ``[msgpack_rpc] host:port`` (nothing when the port is 0)."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.settings = sessions.settings
        self._tls = server_tls_context(self.settings)
        self.address: tuple[str, int] | None = None  # where it listens, while it does

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
        if self._tls is not None:
            listener = _TlsListener(
                listener,
                self._tls,
                standard_compatible=False,
                handshake_timeout=settings.connect_timeout_seconds,
            )
        self.address = (settings.host, settings.port)
        authenticator = self.sessions.authenticator
        if (authenticator is None or authenticator.mode is DeviceAuth.NONE) and (
            settings.host not in ("127.0.0.1", "::1", "localhost")
        ):
            log.warning(
                "MessagePack-RPC server on %s:%d believes any device's equipment id "
                "(%s.device_auth = none): use 'token' or 'certificate' outside a trusted network",
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
        try:
            async with listener:
                await listener.serve(self._serve_connection, tasks)
        finally:
            self.address = None

    async def _serve_connection(self, stream: ByteStream) -> None:
        names = certificate_names(stream)
        session = Session(self.sessions, peer_name(stream), certificate_names=names)
        log.info("MessagePack-RPC connection from %s", session.peer)
        await self.sessions.serve(session, stream, watchdog=True)


class _TlsListener(TLSListener):
    """anyio's TLS listener, logging a failed handshake as one warning instead of a traceback
    (any port scanner or misconfigured client causes one)."""

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: AnyByteStream) -> None:
        peer = peer_name(stream)
        await anyio.aclose_forcefully(stream)
        if not isinstance(exc, Exception) or isinstance(exc, anyio.get_cancelled_exc_class()):
            raise exc
        log.warning("TLS handshake with %s failed: %s", peer, str(exc) or type(exc).__name__)


def peer_name(stream: AnyByteStream) -> str:
    address = stream.extra(SocketAttribute.remote_address, None)
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address or "peer")
