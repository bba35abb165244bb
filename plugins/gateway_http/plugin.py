"""Hook implementations of the HTTP endpoint plugin (``http``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl
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
    if http.port:
        register(HttpService(http))
