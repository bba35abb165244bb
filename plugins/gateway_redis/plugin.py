"""Hook implementations of the Redis store plugin (registered as ``redis``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.cli import Command
from gateway.core import CoreSettings
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.store import Store
from gateway_redis.commands import store_usage_command
from gateway_redis.settings import RedisSettings
from gateway_redis.store import RedisStore


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("redis", RedisSettings)


@hookimpl
def gateway_make_store(settings: Settings) -> Store:
    # Annotated ``Store`` so the type checker holds RedisStore to the host's protocol.
    return RedisStore(settings.get(RedisSettings), settings.get(CoreSettings).data_dir)


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(store_usage_command())
