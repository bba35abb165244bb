"""A deliberately small HTTP/1.1 server: GET on a few fixed paths, one request per connection.

Probes and Prometheus need nothing more, and a full web framework would be the biggest
dependency of the gateway for three routes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import anyio
from anyio.abc import ByteStream, SocketAttribute, TaskStatus

from gateway.errors import GatewayError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Route = Callable[[], Awaitable[Response]]
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class HttpServer:
    def __init__(self, host: str, port: int, routes: Mapping[str, Route], max_request_bytes: int):
        self.host = host
        self.port = port
        self.routes = routes
        self.max_request_bytes = max_request_bytes

    async def serve(self, *, task_status: TaskStatus[int]) -> None:
        """Listen, report the bound port through ``task_status``, serve until cancelled."""
        try:
            listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        except OSError as error:
            reason = error.strerror or str(error)
            raise GatewayError(
                f"http.port: cannot listen on {self.host}:{self.port} ({reason}); choose a free "
                "port, or 0 for no HTTP endpoint"
            ) from None
        async with listener:
            port = listener.extra(SocketAttribute.local_port)
            log.info("HTTP endpoint on %s:%d (/healthz, /readyz, /metrics)", self.host, port)
            task_status.started(port)
            await listener.serve(self._connection)

    async def _connection(self, stream: ByteStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(10):
                    response = await self._respond(await self._read_head(stream))
                    await stream.send(_encode(response))
            except Exception as error:  # a client's mistake must never stop the server
                log.debug("HTTP connection ended: %r", error)

    async def _read_head(self, stream: ByteStream) -> bytes:
        head = b""
        while b"\r\n\r\n" not in head:
            if len(head) > self.max_request_bytes:
                raise ValueError("request head too long")
            head += await stream.receive()
        return head

    async def _respond(self, head: bytes) -> Response:
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3:
            return Response(400, b"bad request line\n")
        method, target = parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace")
        if method != "GET":
            return Response(405, b"only GET\n")
        route = self.routes.get(target.split("?", 1)[0])
        if route is None:
            return Response(404, b"not found\n")
        try:
            return await route()
        except Exception:
            log.exception("HTTP route %s failed", target)
            return Response(500, b"internal error\n")


def _encode(response: Response) -> bytes:
    head = (
        f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'OK')}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + response.body
