"""Hook implementations of the demo plugin: the ``gateway demo`` command."""

from __future__ import annotations

from collections.abc import Callable

from gateway.cli import Command
from gateway.hookspecs import hookimpl
from gateway_demo.command import demo_command


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(demo_command())
