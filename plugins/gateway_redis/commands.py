"""``gateway store usage``: the store's keys by kind and what an ended job costs
(``gateway_redis.usage``), with the retention settings that decide it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio
from redis.exceptions import RedisError

from gateway.app import load_gateway_settings
from gateway.cli import Command
from gateway.core import CoreSettings
from gateway.errors import GatewayError
from gateway.plugins import GatewayPluginManager
from gateway.settings import Settings
from gateway_redis.settings import RedisSettings
from gateway_redis.store import RedisStore
from gateway_redis.usage import RETENTION_SETTINGS, Usage, measure, render


def store_usage_command() -> Command:
    return Command(
        "store usage",
        "what the store holds, by kind of key, and the keys and bytes an ended job costs",
        _configure,
        _run,
    )


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", type=Path, default=None, help="settings file (TOML)")
    parser.add_argument("--json", action="store_true", help="print as JSON")


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    try:
        settings = load_gateway_settings(plugins, args.config)
        store = RedisStore(settings.get(RedisSettings), settings.get(CoreSettings).data_dir)
        usage = anyio.run(_measure, store)
    except (GatewayError, RedisError, OSError) as error:
        print(f"gateway store usage: {error}", file=sys.stderr)
        return 1
    usage.retention = retention(settings)
    if args.json:
        print(json.dumps(usage.as_json(), indent=2))
    else:
        print(render(usage, store.address))
    return 0


async def _measure(store: RedisStore) -> Usage:
    async with store:
        return await measure(store.client, store.keys.prefix)


def retention(settings: Settings) -> dict[str, object]:
    """The retention settings of the loaded plugins (a section not loaded is left out)."""
    sections = dict(settings.items())
    found: dict[str, object] = {}
    for name in RETENTION_SETTINGS:
        section, _, key = name.partition(".")
        if section in sections and hasattr(sections[section], key):
            found[name] = getattr(sections[section], key)
    return found
