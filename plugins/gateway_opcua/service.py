"""The OPC UA server as a gateway service: build, start, follow the status feed, stop.

Start-up loads the information models (a few seconds on a small machine, logged with the memory
they took), builds one MachineryItem per served scope, links every job method to the gateway's
job methods, enters the status feed before reading the scopes' jobs (so nothing that changes in
between is missed), and only then opens the endpoint. The service runs in the ``gateway`` role;
each instance serves its own endpoint over the shared store.
"""

from __future__ import annotations

import logging
import math
import resource
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus
from asyncua import Server
from asyncua.common.connection import TransportLimits

from gateway.core import CoreSettings
from gateway.jobmethods import JobMethods, StatusFeed
from gateway.peers import connection_cap
from gateway_opcua.addressspace import ScopeNodes, add_scope
from gateway_opcua.calls import MethodCalls
from gateway_opcua.events import ScopeEvents
from gateway_opcua.logins import FailedLogins
from gateway_opcua.model import load_information_model
from gateway_opcua.receiver import ReceiverVariables
from gateway_opcua.security import (
    ClientTrust,
    PasswordUsers,
    client_trust,
    drop_distrusted,
    secure,
)
from gateway_opcua.settings import OpcUaSettings

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

SERVER_NAME = "station-gateway"


@dataclass(frozen=True)
class StartupFigures:
    """What starting the server cost: for the log, the tests and the README."""

    seconds: float  # server initialised, models loaded, address space built
    model_seconds: float  # of which loading the four NodeSets
    peak_rss_mb: float  # the process's peak resident memory once started
    rss_growth_mb: float  # how much the server added to it


@dataclass
class OpcUaService:
    settings: OpcUaSettings
    name: str = "opcua"
    roles: frozenset[str] = field(default_factory=lambda: frozenset({"gateway", "jobs"}))
    figures: StartupFigures | None = None
    endpoint: str | None = None  # once listening
    scopes: dict[str, ScopeEvents] = field(default_factory=dict)
    receivers: dict[str, ReceiverVariables] = field(default_factory=dict)

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        core = gateway.settings.get(CoreSettings)
        app_uri = self.settings.application_uri or f"urn:station-gateway:{gateway.instance_id}"
        methods = gateway.job_methods
        if not log.isEnabledFor(logging.DEBUG):  # asyncua logs every publish at INFO
            logging.getLogger("asyncua").setLevel(logging.WARNING)
        started, rss_before = time.perf_counter(), _peak_rss_mb()
        trust = await client_trust(self.settings)
        server = Server(
            user_manager=PasswordUsers(
                self.settings.username,
                _password(self.settings),
                trust,
                FailedLogins(pause=self.settings.failed_login_pause_seconds),
            )
        )
        await server.init()
        server.limits = message_limits(self.settings.max_message_bytes)
        # asyncua's own default is 1,000 connections: past the open-file limit of many hosts.
        server.iserver.max_connections = connection_cap(
            "opcua.max_connections", self.settings.max_connections
        )
        _quiet_refusals()
        host, port = self.settings.host_and_port()
        server.set_endpoint(f"opc.tcp://{host}:{port}")
        server.set_server_name(f"{SERVER_NAME} {gateway.instance_id}")
        await server.set_application_uri(app_uri)
        await secure(server, self.settings, core.data_dir, app_uri, trust)
        model = await load_information_model(server)
        for scope in self.settings.scopes:
            nodes = await add_scope(server, model, scope, app_uri)
            self._link(server, methods, nodes, model.isa95)
            self.scopes[scope] = await ScopeEvents.create(server, model, nodes)
            self.receivers[scope] = ReceiverVariables(nodes)
        async with methods.status_feed(self.settings.scopes) as feed:
            for scope, events in self.scopes.items():
                await events.load(await methods.job_orders(scope))
            await self._refresh_receivers(methods)
            await server.start()
            try:
                self.endpoint = f"opc.tcp://{host}:{port}"
                self.figures = StartupFigures(
                    seconds=time.perf_counter() - started,
                    model_seconds=model.seconds,
                    peak_rss_mb=_peak_rss_mb(),
                    rss_growth_mb=_peak_rss_mb() - rss_before,
                )
                log.info(
                    "OPC UA server on %s (security %s and up, scopes %s): up in %.1f s, "
                    "NodeSets %.1f s, peak memory %.0f MB (+%.0f MB)",
                    self.endpoint,
                    self.settings.security,
                    ", ".join(self.settings.scopes),
                    self.figures.seconds,
                    self.figures.model_seconds,
                    self.figures.peak_rss_mb,
                    self.figures.rss_growth_mb,
                )
                task_status.started()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._follow, feed)
                    if trust is not None:
                        tasks.start_soon(
                            gateway.resilience.every,
                            "opcua.trust",
                            self.settings.trust_poll_seconds,
                            partial(_follow_trust_list, server, trust),
                        )
                    tasks.start_soon(
                        gateway.resilience.every,
                        "opcua.configuration",
                        self.settings.configuration_poll_seconds,
                        partial(self._refresh_receivers, methods),
                    )
                    await gateway.stopping.wait()
                    tasks.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await server.stop()
                log.info("OPC UA server on %s stopped", self.endpoint)

    def _link(self, server: Server, methods: JobMethods, nodes: ScopeNodes, names: int) -> None:
        calls = MethodCalls(
            methods, nodes.scope, names=names, max_argument_bytes=self.settings.max_argument_bytes
        )
        for nodeid, method in nodes.methods.items():
            server.link_method(
                server.get_node(nodeid), calls.callback(method, nodes.parents[nodeid])
            )

    async def _refresh_receivers(self, methods: JobMethods) -> None:
        for receiver in self.receivers.values():
            await receiver.refresh(methods)

    async def _follow(self, feed: StatusFeed) -> None:
        async for status in feed:
            events = self.scopes.get(status.scope)
            if events is None:
                continue
            try:
                await events.publish(status)
            except Exception:  # a client-side hiccup must not end the server
                log.exception(
                    "OPC UA: status event of %s/%s failed", status.scope, status.job_order_id
                )


async def _follow_trust_list(server: Server, trust: ClientTrust) -> None:
    """A change to the trust list applies to the sessions open too: the clients it no longer
    trusts are cut off."""
    if await trust.reload_if_changed():
        drop_distrusted(server, trust)


def _password(settings: OpcUaSettings) -> str:
    assert settings.password is not None  # checked by the settings
    return settings.password.reveal()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def message_limits(max_message_bytes: int) -> TransportLimits:
    """asyncua's transport limits for messages up to ``max_message_bytes`` (its default is
    100 MB: a client could make the server hold that much per request)."""
    chunk = 65_535
    return TransportLimits(
        max_recv_buffer=chunk,
        max_send_buffer=chunk,
        max_chunk_count=math.ceil(max_message_bytes / chunk),
        max_message_size=max_message_bytes,
    )


class _RefusalsOncePerMinute(logging.Filter):
    """asyncua logs every connection it refuses (over max_connections) at WARNING: a peer
    opening connections by the thousand would flood the log. One a minute is enough."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -60.0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Refusing connection"):
            return True
        now = time.monotonic()
        if now - self._last < 60:
            return False
        self._last = now
        return True


def _quiet_refusals() -> None:
    logger = logging.getLogger("asyncua.server.binary_server_asyncio")
    if not any(isinstance(f, _RefusalsOncePerMinute) for f in logger.filters):
        logger.addFilter(_RefusalsOncePerMinute())
