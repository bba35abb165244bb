"""Station gateway host: plugin system, CloudEvents, settings and runtime.

The public API for plugins lives in these modules:

- ``gateway.hookspecs`` (``hookimpl`` marker and the hook specifications)
- ``gateway.cloudevents`` (the ``CloudEvent`` model)
- ``gateway.codecs`` (JSON, msgpack and MQTT v5 wire formats)
- ``gateway.settings`` (declaring a settings section)
- ``gateway.transport`` (bindings, processors, subscriptions, error replies)
- ``gateway.store`` (what a store/coordination backend offers)
- ``gateway.app`` (the ``Gateway`` object handed to lifecycle hooks)
- ``gateway.cli`` (``Command``, for ``gateway_register_commands``)
- ``gateway.testing`` (fixtures and helpers for plugin tests)
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("station-gateway")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
