"""``gateway recipe ...``: check and draw SFC recipes without running them."""

from __future__ import annotations

import argparse

from gateway.cli import Command
from gateway.plugins import GatewayPluginManager


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["validate", "render"])
    parser.add_argument("file")


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    raise NotImplementedError("being written")


def recipe_command() -> Command:
    return Command("recipe", "validate or render an SFC recipe file", _configure, _run)
