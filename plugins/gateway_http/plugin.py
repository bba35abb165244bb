"""Hook implementations of the HTTP endpoint plugin (``http``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.errors import PluginError
from gateway.hookspecs import ASGIApp, hookimpl
from gateway.settings import Settings
from gateway.transport import Service
from gateway_http.service import HttpService
from gateway_http.settings import HttpSettings

if TYPE_CHECKING:
    from gateway.phases import ServicePhase


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("http", HttpSettings)


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    http = settings.get(HttpSettings)
    if not http.port:
        return
    mounts: list[tuple[str, ASGIApp]] = []

    def mount(prefix: str, app: ASGIApp) -> None:
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise PluginError(
                f"HTTP mount {prefix!r}: a prefix starts with / and does not end with /"
            )
        if any(existing == prefix for existing, _ in mounts):
            raise PluginError(f"two HTTP applications want the prefix {prefix!r}")
        mounts.append((prefix, app))

    gateway.plugins.hook.gateway_register_http_apps(
        register=mount, settings=settings, gateway=gateway
    )
    register(HttpService(http, mounts))
