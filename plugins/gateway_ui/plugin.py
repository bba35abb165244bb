"""Hook implementations of the operator's view (registered as ``ui``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.hookspecs import ASGIApp, hookimpl
from gateway.settings import Settings
from gateway.transport import Service
from gateway_ui.app import UiApplications
from gateway_ui.guard import Guard, guarded_register
from gateway_ui.live import LiveFeed
from gateway_ui.settings import UiSettings
from gateway_ui.trace import TraceObserver
from gateway_ui.trace_writer import TraceWriter

if TYPE_CHECKING:
    from gateway.phases import ServicePhase


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("ui", UiSettings)


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    ui = settings.get(UiSettings)
    if ui.enabled and gateway.store is not None and _serves_http(settings):
        register(live_feed(gateway))  # idle until a page follows a stream
    writer = TraceWriter(ui, gateway)
    if gateway.store is None or not gateway.runs(writer.roles):
        return
    gateway.state.add(writer)
    # The observer hooks do not say which gateway they concern (a process may run several):
    # each gateway gets an observer of its own, registered with its own plugin manager.
    gateway.plugins.register(TraceObserver(writer), name=f"ui-trace-{uuid.uuid4().hex}")
    register(writer)


@hookimpl
def gateway_register_http_apps(
    register: Callable[[str, ASGIApp], None], settings: Settings, gateway: ServicePhase
) -> None:
    ui = settings.get(UiSettings)
    if not ui.enabled or gateway.store is None:
        return
    # Every application below goes through the guard (frames, origins, logins, stream caps).
    register = guarded_register(register, Guard(ui))
    applications = UiApplications(gateway, ui, live_feed(gateway))
    register("/ui", applications.pages())
    register("/api/scopes", applications.api())
    register("/api/station", applications.station())


def live_feed(gateway: ServicePhase) -> LiveFeed:
    """The gateway's one reader of the streams pages follow (made by whichever hook asks first:
    the service that runs it and the applications that use it)."""
    feed = gateway.state.find(LiveFeed)
    if feed is None:
        assert gateway.store is not None
        feed = gateway.state.add(LiveFeed(gateway.store, gateway.resilience))
    return feed


def _serves_http(settings: Settings) -> bool:
    """Whether this gateway has an HTTP endpoint (``[http] port``) to serve the pages on."""
    try:
        return bool(getattr(settings.section("http"), "port", 0))
    except KeyError:
        return False
