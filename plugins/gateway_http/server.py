"""The HTTP endpoint's server: Starlette routing on Uvicorn, inside the gateway's task group.

Probes and metrics alone would need little, but the operator's web UI streams Server-Sent
Events to many browsers at once and other plugins mount their own applications; Starlette and
Uvicorn (both small, pure Python, widely deployed) do HTTP/1.1 keep-alive, streaming,
disconnect detection and graceful shutdown properly, which a hand-written server would not.

Every connection is bounded (``guarded_protocol``): at most ``http.max_connections`` at once
(one more closes the connection idle longest, or is itself closed when all are busy, so a peer
opening connections by the thousand cannot take the files the gateway needs for Redis and
MQTT, nor keep probes out), a request head must be complete
within ``http.request_head_seconds`` of the connection or of the previous response (a client
sending its head byte by byte, or nothing at all, is closed), an idle keep-alive connection is
closed after ``http.idle_seconds``, and no connection lasts longer than
``http.connection_max_seconds``.

Uvicorn never installs signal handlers here (the gateway owns SIGINT/SIGTERM) and never touches
logging configuration; it serves on a socket bound before ``serve`` reports started, so the
bound port is known (``port = 0`` picks a free one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.responses import Response as StarletteResponse
from starlette.routing import BaseRoute, Mount, Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from gateway.errors import GatewayError
from gateway.hookspecs import ASGIApp
from gateway.peers import LogOnce

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Response:
    """What a fixed route answers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


FixedRoute = Callable[[], Awaitable[Response]]


def build_app(routes: Mapping[str, FixedRoute], mounts: Sequence[tuple[str, ASGIApp]]) -> Starlette:
    """GET routes answered by ``routes`` and the applications of other plugins under prefixes."""
    table: list[BaseRoute] = [
        Route(path, _endpoint(path, route), methods=["GET"]) for path, route in routes.items()
    ]
    table.extend(Mount(prefix, app=app) for prefix, app in mounts)
    return Starlette(routes=table)


def _endpoint(path: str, route: FixedRoute) -> Callable[[Request], Awaitable[StarletteResponse]]:
    async def endpoint(request: Request) -> StarletteResponse:
        try:
            reply = await route()
        except Exception:
            log.exception("HTTP route %s failed", path)
            return PlainTextResponse("internal error\n", status_code=500)
        # Probes and scrapers ask once and often read until the connection ends: close it.
        return StarletteResponse(
            reply.body,
            status_code=reply.status,
            media_type=reply.content_type,
            headers={"Connection": "close"},
        )

    return endpoint


class _EmbeddedServer(uvicorn.Server):
    """Uvicorn without its signal handlers: the gateway decides when the endpoint stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True)
class ConnectionLimits:
    """What one HTTP connection may hold (see ``HttpSettings``)."""

    max_connections: int = 256
    request_head_seconds: float = 10.0
    idle_seconds: float = 5.0
    connection_max_seconds: float = 3600.0


# Connections over the cap that an eviction makes room for only later (the evicted ones close
# on the next turn of the event loop); past this many more, a new connection is refused.
EVICTING = 16


def guarded_protocol(
    limits: ConnectionLimits, refused: Callable[[], None] = lambda: None
) -> type[asyncio.Protocol]:
    """Uvicorn's HTTP/1.1 protocol with ``limits`` on each connection.

    With ``max_connections`` open, a new connection makes room by closing the one that has
    waited longest for a request head (a peer holding idle connections loses them first, and
    a probe or a page that sends its request at once still gets in); when every connection is
    busy with a request, the new one is closed at once. ``refused`` is called for each
    connection closed either way."""
    refusals = LogOnce(log)

    class GuardedH11(H11Protocol):
        _refused = False
        _head_timer: asyncio.TimerHandle | None = None
        _life_timer: asyncio.TimerHandle | None = None
        _waiting_since: float = 0.0  # when it began to wait for a request head
        _waiting_cycle: Any = None  # the request cycle current then

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            connections = self.server_state.connections
            if len(connections) >= limits.max_connections and (
                len(connections) >= limits.max_connections + EVICTING
                or not self._evict_one(connections)
            ):
                self._refused = True
                transport.abort()  # its file goes back at once
                refused()
                refusals.report(
                    "http",
                    "HTTP connection refused: %d connections open, all busy (http.max_connections)",
                    limits.max_connections,
                )
                return
            super().connection_made(transport)
            self._life_timer = self.loop.call_later(
                limits.connection_max_seconds, self.transport.close
            )
            self._wait_for_head()

        def _waiting_for_head(self) -> bool:
            return self.cycle is self._waiting_cycle and not self.transport.is_closing()

        def _evict_one(self, connections: set[Any]) -> bool:
            idle = [
                other
                for other in connections
                if isinstance(other, GuardedH11) and other._waiting_for_head()
            ]
            if not idle:
                return False
            oldest = min(idle, key=lambda other: other._waiting_since)
            oldest.transport.close()
            refused()
            refusals.report(
                "http-evict",
                "HTTP connections over http.max_connections (%d): closing the idle ones",
                limits.max_connections,
            )
            return True

        def _wait_for_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._waiting_since = self.loop.time()
            self._waiting_cycle = self.cycle
            self._head_timer = self.loop.call_later(limits.request_head_seconds, self._no_head)

        def _no_head(self) -> None:
            if self._waiting_for_head():
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._wait_for_head()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            for timer in (self._head_timer, self._life_timer):
                if timer is not None:
                    timer.cancel()
            super().connection_lost(exc)

    return GuardedH11


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        app: ASGIApp,
        *,
        max_request_bytes: int,
        grace_seconds: float,
        limits: ConnectionLimits = ConnectionLimits(),
        refused: Callable[[], None] = lambda: None,
    ):
        self.host = host
        self.port = port
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.grace_seconds = grace_seconds
        self.limits = limits
        self.refused = refused

    async def serve(self, stopping: anyio.Event, *, task_status: TaskStatus[int]) -> None:
        """Listen, report the bound port through ``task_status``, serve until ``stopping``."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as error:
            sock.close()
            reason = error.strerror or str(error)
            raise GatewayError(
                f"http.port: cannot listen on {self.host}:{self.port} ({reason}); choose a free "
                "port, or 0 for no HTTP endpoint"
            ) from None
        config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            h11_max_incomplete_event_size=self.max_request_bytes,
            http=guarded_protocol(self.limits, self.refused),
            timeout_keep_alive=max(1, round(self.limits.idle_seconds)),
            timeout_graceful_shutdown=max(1, round(self.grace_seconds)),
            server_header=False,
        )
        server = _EmbeddedServer(config)
        port = sock.getsockname()[1]
        log.info("HTTP endpoint on %s:%d", self.host, port)
        task_status.started(port)
        async with anyio.create_task_group() as tasks:

            async def stop_when_asked() -> None:
                await stopping.wait()
                server.should_exit = True

            tasks.start_soon(stop_when_asked)
            try:
                await server.serve(sockets=[sock])
            finally:
                sock.close()
                tasks.cancel_scope.cancel()
