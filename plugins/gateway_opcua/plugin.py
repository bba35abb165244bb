"""Hook implementations of the OPC UA server plugin (registered as ``opcua``).

The ``[opcua]`` section is always declared; the server (and asyncua, an optional dependency
under the LGPL: ``pip install station-gateway[opcua]``) is only imported when ``enabled``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.errors import PluginError
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.transport import Service
from gateway_opcua.settings import OpcUaSettings

if TYPE_CHECKING:
    from gateway.phases import ServicePhase


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("opcua", OpcUaSettings)


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    opcua = settings.get(OpcUaSettings)
    if not opcua.enabled:
        return
    if importlib.util.find_spec("asyncua") is None:
        raise PluginError(
            "opcua.enabled is true but asyncua is not installed: "
            "pip install 'station-gateway[opcua]'"
        )
    gateway.job_methods  # noqa: B018  # PluginError now, not at run, when no plugin serves jobs
    from gateway_opcua.service import OpcUaService  # asyncua is imported from here on

    register(OpcUaService(opcua))
