"""Hook implementations of the Sparkplug B mirror (registered as ``sparkplug``).

The ``[sparkplug]`` section is always declared; the service (and protobuf, an optional
dependency: ``pip install station-gateway[sparkplug]``) is only imported when ``enabled``.
"""

from __future__ import annotations

import argparse
import importlib.util
import ssl
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.cli import Command
from gateway.errors import PluginError, SettingsError
from gateway.hookspecs import hookimpl
from gateway.settings import Settings, url_problem
from gateway.transport import Service
from gateway_mqtt import MqttSettings
from gateway_sparkplug.settings import SparkplugSettings

if TYPE_CHECKING:
    from gateway.phases import ServicePhase
    from gateway.plugins import GatewayPluginManager
    from gateway_sparkplug.connection import BrokerAddress


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("sparkplug", SparkplugSettings)


def broker_address(settings: Settings) -> BrokerAddress:
    """The broker of the Sparkplug connections: ``sparkplug.url`` or else ``mqtt.url``."""
    from gateway_sparkplug.connection import BrokerAddress

    sparkplug = settings.get(SparkplugSettings)
    mqtt = settings.find(MqttSettings)
    url = sparkplug.url or (mqtt.url if mqtt is not None else "")
    key = "sparkplug.url" if sparkplug.url else "mqtt.url"
    if not url or url_problem(url, ("mqtt", "mqtts")) is not None:
        raise SettingsError(
            key,
            f"Sparkplug needs an mqtt:// or mqtts:// broker (its NDEATH is a Will, which the "
            f"in-process memory:// broker does not keep), got {url!r}: set sparkplug.url to "
            f"a real broker (gateway demo: --mqtt mqtt://host:port)",
        )
    password = sparkplug.password or (mqtt.password if mqtt is not None else None)
    tls = None
    if url.startswith("mqtts://") and mqtt is not None and mqtt.tls_ca_file:
        tls = ssl.create_default_context(cafile=mqtt.tls_ca_file)
    return BrokerAddress(
        url,
        username=sparkplug.username or (mqtt.username if mqtt is not None else "") or None,
        password=None if password is None else password.reveal(),
        tls=tls,
        keepalive=sparkplug.keepalive_seconds,
    )


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    sparkplug = settings.get(SparkplugSettings)
    if not sparkplug.enabled:
        return
    if importlib.util.find_spec("google.protobuf") is None:
        raise PluginError(
            "sparkplug.enabled is true but protobuf is not installed: "
            "pip install 'station-gateway[sparkplug]'"
        )
    if gateway.store is None:
        raise PluginError("sparkplug.enabled is true but no plugin provides a store")
    gateway.job_methods  # noqa: B018  # PluginError now, not at run, when no plugin serves jobs
    from gateway_sparkplug.activity import ActivityObserver, ActivityRecorder
    from gateway_sparkplug.service import SparkplugService
    from gateway_sparkplug.topics import valid_id

    if not valid_id(sparkplug.group_id):
        raise SettingsError("sparkplug.group_id", "must be non-empty, without '/', '+' or '#'")
    broker = broker_address(settings)
    recorder = ActivityRecorder()
    # The observer hooks do not say which gateway they concern (a process may run several):
    # each gateway gets an observer of its own, registered with its own plugin manager.
    gateway.plugins.register(
        ActivityObserver(recorder), name=f"sparkplug-activity-{uuid.uuid4().hex}"
    )
    register(recorder)
    register(gateway.state.add(SparkplugService(sparkplug, broker)))


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(
        Command(
            "sparkplug watch",
            "watch the Sparkplug B messages of a group and print the tag tree a SCADA host sees",
            _configure_command,
            _run_command,
        )
    )


def _configure_command(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mqtt", required=True, help="the broker (mqtt://host:port)")
    parser.add_argument("--group", default="+", help="Sparkplug group id (default: every group)")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument(
        "--until-death", action="store_true", help="stop at the first NDEATH (a gateway stopped)"
    )


def _run_command(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    if importlib.util.find_spec("google.protobuf") is None:
        print(
            "gateway sparkplug: protobuf is not installed: pip install 'station-gateway[sparkplug]'"
        )
        return 1
    from gateway_sparkplug.watch import run_command  # protobuf is imported from here on

    return run_command(args)
