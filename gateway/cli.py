"""The ``gateway`` command: ``run``, ``plugins``, ``config show``, plus plugin subcommands.

Plugins add commands through ``gateway_register_commands``; a command named ``"group action"``
(``"config push"``) becomes an action of that group, beside the host's own (``config show``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import signal
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from gateway import __version__
from gateway.app import Gateway, load_gateway_settings, settings_registry
from gateway.core import CoreSettings
from gateway.errors import GatewayError
from gateway.hookspecs import hookimpl
from gateway.logs import configure_logging
from gateway.plugins import GatewayPluginManager, build_plugin_manager
from gateway.settings import load_settings


@dataclass(frozen=True)
class Command:
    """A subcommand: ``configure`` adds its arguments, ``run`` returns the exit status."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, GatewayPluginManager], int]


def _add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", type=Path, default=None, help="settings file (TOML)")


def _configure_run(parser: argparse.ArgumentParser) -> None:
    _add_config_argument(parser)
    parser.add_argument(
        "--role",
        default=None,
        help="run only the services of this role: all (default), gateway, jobs, engine, "
        "publisher, simulator (when enabled), or one a third-party plugin declares; an unknown "
        "role is refused, naming the known ones",
    )
    parser.add_argument(
        "--simulator",
        action="store_true",
        help="also run the simulated station (positioning unit, tightening controller, camera "
        "QA) on the gateway's broker: the setting simulator.enabled, for a first job",
    )


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    environ = None
    if args.role:
        environ = {**os.environ, "GATEWAY_GATEWAY_ROLE": args.role}
    if args.simulator:  # as the environment would set it (so it wins over a settings file)
        environ = {**(environ or os.environ), "GATEWAY_SIMULATOR_ENABLED": "true"}
    settings = load_gateway_settings(plugins, args.config, environ)
    configure_logging(settings)
    gateway = Gateway(settings, plugins)
    plugins.register(_StartupHeapFrozen(), name="gateway-startup-heap")
    try:
        anyio.run(
            lambda: gateway.run(handle_signals=True),
            backend_options={"use_uvloop": _uvloop(settings.get(CoreSettings).event_loop)},
        )
    except GatewayError as error:
        print(f"gateway: {error}", file=sys.stderr)
        return 1
    return 0


class _StartupHeapFrozen:
    """Once ``gateway run`` has started, what start-up built (modules, classes, settings,
    plugins: most of the heap) is moved out of the cyclic GC's reach (``gc.freeze``).

    It lives as long as the process, yet every full collection walked it again: about 80 ms
    a time under load, a few times a minute (docs/performance.md). Garbage start-up left is
    collected first, so none of it is kept for good."""

    @hookimpl
    def gateway_startup(self, gateway: Gateway) -> None:
        gc.collect()
        gc.freeze()


def _uvloop(choice: str) -> bool:
    """Whether to run on uvloop: chosen and installed (it is a dependency where it builds)."""
    return choice == "uvloop" and importlib.util.find_spec("uvloop") is not None


def _configure_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON")


def _plugins(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    infos = plugins.describe()
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    for info in infos:
        print(f"{info.name} {info.version} ({info.origin})")
        for hook in info.hooks:
            print(f"    {hook}")
    return 0


def _configure_config_show(parser: argparse.ArgumentParser) -> None:
    _add_config_argument(parser)
    parser.add_argument(
        "section",
        nargs="*",
        metavar="SECTION",
        help="only these sections (e.g. mqtt redis); default: all",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON: {section: {key: {value, from, env, help}}}",
    )


def _config(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    registry = settings_registry(plugins)
    settings = load_settings(registry, args.config)
    helps = {(info.section, info.key): info for info in registry.describe()}
    masked = settings.masked()
    unknown = [name for name in args.section if name not in masked]
    if unknown:
        print(
            f"gateway config show: no section {', '.join(unknown)} (known: {', '.join(masked)})",
            file=sys.stderr,
        )
        return 2
    sections = _file_order(list(args.section or masked), args.config)
    if args.json:
        document = {
            section: {
                key: {
                    "value": value,
                    "from": settings.sources.get(f"{section}.{key}", "default"),
                    "env": helps[(section, key)].env_name,
                    "help": helps[(section, key)].help,
                }
                for key, value in masked[section].items()
            }
            for section in sections
        }
        print(json.dumps(document, indent=2, default=str))
        return 0
    for section in sections:
        values = masked[section]
        print(f"[{section}]")
        for key, value in values.items():
            info = helps[(section, key)]
            origin = settings.sources.get(f"{section}.{key}", "default")
            print(f"# {info.help} ({info.env_name}; from {origin})")
            if value is None:
                print(f"# {key} is unset")
            else:
                print(f"{key} = {_toml_value(value)}")
        print()
    return 0


def _file_order(sections: list[str], path: Path | None) -> list[str]:
    """``sections`` in the order of the settings file (those it has, first), the others in the
    order the plugins load (the registry's)."""
    if path is None:
        return sections
    try:
        in_file = list(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, tomllib.TOMLDecodeError):
        return sections  # load_settings read it already: not reached
    rank = {name: index for index, name in enumerate(in_file)}
    return sorted(sections, key=lambda name: rank.get(name, len(rank)))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value))


BUILTIN_COMMANDS = (
    Command("run", "run the gateway until SIGINT/SIGTERM", _configure_run, _run),
    Command("plugins", "list loaded plugins, versions and hooks", _configure_plugins, _plugins),
    Command("config show", "print the effective settings", _configure_config_show, _config),
)
# Help of command groups: ``gateway config show``, and ``config push`` from the jobs plugin.
GROUP_HELP = {"config": "inspect settings, push station configuration"}


def build_parser(plugins: GatewayPluginManager) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="Industrial station gateway")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True)
    commands: dict[str, Command] = {}
    groups: dict[str, Any] = {}  # group name -> its subparsers ("config" -> show, push)

    def register(command: Command) -> None:
        """A name with a space (``"config push"``) is an action of a command group."""
        group, _, action = command.name.partition(" ")
        if command.name in commands or (action and group in commands):
            raise GatewayError(f"two plugins provide the command {command.name!r}")
        if not action and command.name in groups:
            raise GatewayError(f"the command {command.name!r} is a group of commands already")
        commands[command.name] = command
        target = subcommands
        if action:
            if group not in groups:
                help = GROUP_HELP.get(group, f"{group} commands")
                parent = subcommands.add_parser(group, help=help, description=help)
                groups[group] = parent.add_subparsers(dest="action", required=True)
            target = groups[group]
        name = action or command.name
        sub = target.add_parser(name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(handler=command.run)

    for command in BUILTIN_COMMANDS:
        register(command)
    plugins.hook.gateway_register_commands(register=register)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        plugins = build_plugin_manager()
        args = build_parser(plugins).parse_args(argv)
        status: int = args.handler(args, plugins)
    except GatewayError as error:
        print(f"gateway: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_went_away()
    return status


def _reader_went_away() -> int:
    """The output's reader closed it (``gateway config show | head``): stop quietly.

    Python would complain again when it flushes stdout at exit, so stdout becomes /dev/null.
    The status is the shell's for a process ended by SIGPIPE.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
