"""Hook implementations of the SFC recipe engine plugin."""

from __future__ import annotations

from collections.abc import Callable

from gateway.cli import Command
from gateway.hookspecs import hookimpl
from gateway_sfc.commands import recipe_command


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(recipe_command())
