"""Hook implementations of the hello plugin, written against the gateway's public API only.

- settings section ``[hello]`` (``GATEWAY_HELLO_GREETING``)
- CLI command ``gateway hello`` printing the configured greeting
- a processor on the ``mqtt`` binding answering ``com.example.hello.v1`` commands sent to
  ``hello/<scope>/commands`` with ``{"greeting": "<greeting>, <name>"}``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.app import load_gateway_settings
from gateway.cli import Command
from gateway.cloudevents import CloudEvent
from gateway.codecs import codec_for
from gateway.codecs.base import structure
from gateway.core import CoreSettings
from gateway.errors import CloudEventError
from gateway.hookspecs import hookimpl
from gateway.plugins import GatewayPluginManager
from gateway.settings import Settings, setting
from gateway.transport import Processor, Subscription

HELLO_TYPE = "com.example.hello.v1"
HELLO_TOPIC = "hello/+/commands"


@dataclass(frozen=True)
class HelloSettings:
    greeting: str = setting("Hello", "How the hello plugin greets")


@dataclass(frozen=True)
class HelloCall:
    """The payload of a hello command."""

    name: str


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("hello", HelloSettings)


# -- the ``gateway hello`` command -----------------------------------------------------------


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", type=Path, default=None, help="settings file (TOML)")


def _hello(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    settings = load_gateway_settings(plugins, args.config)
    print(settings.get(HelloSettings).greeting)
    return 0


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(Command("hello", "print the configured greeting", _configure, _hello))


# -- the processor ---------------------------------------------------------------------------


def make_handler(greeting: str, source: str) -> Callable[[CloudEvent], Any]:
    async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
        codec = codec_for(event.datacontenttype)
        if codec is None:
            raise CloudEventError("datacontenttype", "hello commands are JSON or msgpack")
        call = structure(codec.converter, event.data, HelloCall)
        return [event.reply(source=source, data={"greeting": f"{greeting}, {call.name}"})]

    return handle


@hookimpl
def gateway_register_processors(register: Callable[[Processor], None], settings: Settings) -> None:
    register(
        Processor(
            name="hello",
            subscriptions=[Subscription(HELLO_TOPIC)],
            handle=make_handler(
                settings.get(HelloSettings).greeting,
                settings.get(CoreSettings).effective_source,
            ),
            event_types=frozenset({HELLO_TYPE}),
            binding="mqtt",
        )
    )
