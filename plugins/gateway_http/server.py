"""The HTTP endpoint's server: Starlette routing on Uvicorn, inside the gateway's task group.

Probes and metrics alone would need little, but the operator's web UI streams Server-Sent
Events to many browsers at once and other plugins mount their own applications; Starlette and
Uvicorn (both small, pure Python, widely deployed) do HTTP/1.1 keep-alive, streaming,
disconnect detection and graceful shutdown properly, which a hand-written server would not.

Uvicorn never installs signal handlers here (the gateway owns SIGINT/SIGTERM) and never touches
logging configuration; it serves on a socket bound before ``serve`` reports started, so the
bound port is known (``port = 0`` picks a free one).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.responses import Response as StarletteResponse
from starlette.routing import BaseRoute, Mount, Route

from gateway.errors import GatewayError
from gateway.hookspecs import ASGIApp

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


class HttpServer:
    def __init__(
        self, host: str, port: int, app: ASGIApp, *, max_request_bytes: int, grace_seconds: float
    ):
        self.host = host
        self.port = port
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.grace_seconds = grace_seconds

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
