"""Building the plugin manager: third-party entry points, then the default plugins.

Nothing is loaded at import time; ``build_plugin_manager`` does it when the CLI or a test asks.
Two environment variables choose what loads (names as listed by ``gateway plugins``):

- ``GATEWAY_PLUGINS_BLOCK``: comma-separated plugins never to load (default plugins included);
- ``GATEWAY_PLUGINS_ALLOW``: when set, only these plugins load (``core`` always does).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pluggy

from gateway import __version__, hookspecs
from gateway.errors import PluginError

log = logging.getLogger(__name__)

# (plugin name, module) of the plugins shipped with the gateway, registered with the same
# ``@hookimpl`` marker a third party uses. ``core`` is the host's own settings section.
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("core", "gateway.core"),
    ("redis", "gateway_redis.plugin"),
    ("mqtt", "gateway_mqtt.plugin"),
    ("msgpack-rpc", "gateway_msgpack_rpc.plugin"),
    ("jobs", "gateway_jobs.plugin"),
    ("runtime", "gateway_runtime.plugin"),
    ("sfc", "gateway_sfc.plugin"),
    ("sequence", "gateway_sequence.plugin"),
    ("cycle", "gateway_cycle.plugin"),
    ("mqtt-equipment", "gateway_mqtt_equipment.plugin"),
    ("line", "gateway_line.plugin"),
    ("simulator", "gateway_simulator.plugin"),
    ("publisher", "gateway_publisher.plugin"),
    ("http", "gateway_http.plugin"),
    ("ui", "gateway_ui.plugin"),
    ("opcua", "gateway_opcua.plugin"),
    ("sparkplug", "gateway_sparkplug.plugin"),
    ("demo", "gateway_demo.plugin"),
)
ALWAYS_LOADED = frozenset({"core"})


@dataclass(frozen=True)
class PluginInfo:
    name: str
    version: str
    origin: str  # "default" or the distribution that ships it
    hooks: tuple[str, ...]


class GatewayPluginManager(pluggy.PluginManager):
    """A pluggy manager that also remembers where each plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self._origins: dict[str, tuple[str, str]] = {}
        # Plugins left out by GATEWAY_PLUGINS_BLOCK / _ALLOW: variables of their sections are
        # not refused as unknown (one environment serves every role of a deployment).
        self.skipped: set[str] = set()

    def register_named(self, plugin: Any, name: str, *, origin: str, version: str) -> None:
        if self.get_plugin(name) is not None:
            raise PluginError(f"two plugins are named {name!r}")
        if self.is_registered(plugin):
            raise PluginError(f"plugin {name!r} is already registered as {self.get_name(plugin)!r}")
        self.register(plugin, name=name)
        self._origins[name] = (origin, version)

    def describe(self) -> list[PluginInfo]:
        infos = []
        for name, plugin in sorted(self.list_name_plugin(), key=lambda pair: pair[0]):
            origin, version = self._origins.get(name, ("registered", "?"))
            hooks = tuple(sorted(caller.name for caller in self.get_hookcallers(plugin) or ()))
            infos.append(PluginInfo(name, version, origin, hooks))
        return infos


def _names(value: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (value or "").split(",") if part.strip())


def build_plugin_manager(
    environ: Mapping[str, str] | None = None, *, extra_plugins: Mapping[str, Any] | None = None
) -> GatewayPluginManager:
    """Load entry-point plugins, then ``DEFAULT_PLUGINS``, then check every hook is known.

    ``extra_plugins`` (name -> plugin object) are registered last; tests use it.
    """
    environ = os.environ if environ is None else environ
    blocked = _names(environ.get("GATEWAY_PLUGINS_BLOCK")) - ALWAYS_LOADED
    allowed = _names(environ.get("GATEWAY_PLUGINS_ALLOW"))

    manager = GatewayPluginManager()

    def wanted(name: str) -> bool:
        if name in ALWAYS_LOADED:
            return True
        if name in blocked:
            log.info("plugin %s blocked by GATEWAY_PLUGINS_BLOCK", name)
            manager.skipped.add(name)
            return False
        if allowed and name not in allowed:
            log.info("plugin %s not in GATEWAY_PLUGINS_ALLOW", name)
            manager.skipped.add(name)
            return False
        return True

    for entry_point in entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        if not wanted(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
        except Exception as error:
            raise PluginError(f"plugin {entry_point.name!r} failed to load: {error}") from error
        dist = entry_point.dist
        manager.register_named(
            plugin,
            entry_point.name,
            origin=dist.name if dist else entry_point.value,
            version=dist.version if dist else "?",
        )
    for name, module in DEFAULT_PLUGINS:
        if wanted(name):
            manager.register_named(
                importlib.import_module(module), name, origin="default", version=__version__
            )
    for name, plugin in (extra_plugins or {}).items():
        manager.register_named(plugin, name, origin="extra", version="?")
    manager.check_pending()
    return manager
