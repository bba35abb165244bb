"""The HTTP service: what /healthz, /readyz and /metrics answer, and the plugins' applications.

Other plugins mount ASGI applications under path prefixes through the
``gateway_register_http_apps`` hook (the operator's web UI at ``/ui``, its JSON at ``/api``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from gateway.hookspecs import ASGIApp
from gateway.peers import connection_cap
from gateway_http.server import ConnectionLimits, HttpServer, Response, build_app
from gateway_http.settings import HttpSettings

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


class HttpService:
    """Runs in every role: each instance, gateway or publisher, answers its own probes."""

    name = "http"
    roles = frozenset({"*"})
    before_bindings = True  # probes get answers (not ready yet) while the broker is reached

    def __init__(self, settings: HttpSettings, mounts: Sequence[tuple[str, ASGIApp]] = ()) -> None:
        self.settings = settings
        self.mounts = list(mounts)  # (path prefix, application) from other plugins
        self.port: int | None = None  # the bound port, once listening

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        routes = {
            "/healthz": self._healthz,
            "/readyz": lambda: self._readyz(gateway),
            "/metrics": lambda: self._metrics(gateway),
        }
        settings = self.settings
        refused = gateway.metrics.counter(
            "http_connections_refused_total",
            "HTTP connections closed at once because http.max_connections were open",
        )
        limits = ConnectionLimits(
            max_connections=connection_cap("http.max_connections", settings.max_connections),
            request_head_seconds=settings.request_head_seconds,
            idle_seconds=settings.idle_seconds,
            connection_max_seconds=settings.connection_max_seconds,
        )
        server = HttpServer(
            settings.host,
            settings.port,
            build_app(routes, self.mounts),
            max_request_bytes=settings.max_request_bytes,
            grace_seconds=gateway.grace_seconds,
            limits=limits,
            refused=refused.inc,
        )
        async with anyio.create_task_group() as tasks:
            self.port = await tasks.start(server.serve, gateway.stopping)
            task_status.started()

    async def _healthz(self) -> Response:
        return Response(200, b"ok\n")  # answering at all is the proof of life

    async def _readyz(self, gateway: Gateway) -> Response:
        checks = await readiness(gateway)
        ready = all(checks.values())
        answer = {"ready": ready, "checks": checks, "failing": gateway.readiness.failing}
        body = json.dumps(answer).encode() + b"\n"
        return Response(200 if ready else 503, body, "application/json")

    async def _metrics(self, gateway: Gateway) -> Response:
        return Response(200, await gateway.metrics.render(), PROMETHEUS)


async def readiness(gateway: Gateway) -> dict[str, bool]:
    """Every condition for taking work: started, store answering, transports connected, and
    no long-running loop failing (``gateway.readiness``: the loops that hit an outage, by
    name; ``failing`` in the answer says why)."""
    checks = {"started": gateway.started}
    if gateway.store is not None:
        checks["store"] = False
        with anyio.move_on_after(2):
            try:
                checks["store"] = await gateway.store.ping()
            except Exception as error:  # a store plugin whose ping raises: not ready
                log.debug("store ping failed: %r", error)
    for name, binding in gateway.bindings.items():
        checks[f"binding {name}"] = binding.ready
    for check in gateway.readiness.failing:
        checks[check] = False
    return checks
