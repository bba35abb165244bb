"""Fixtures for the Redis store plugin: stores built from settings the way the gateway does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

import pytest

from gateway.app import load_gateway_settings
from gateway.plugins import build_plugin_manager
from gateway_redis import RedisStore

StoreFromEnviron = Callable[[Mapping[str, str]], RedisStore]
StoreFactory = Callable[..., RedisStore]


def _store_from_environ(environ: Mapping[str, str]) -> RedisStore:
    """Plugin manager, settings and the ``gateway_make_store`` hook, as ``Gateway`` uses them."""
    environ = {"GATEWAY_PLUGINS_ALLOW": "redis", **environ}  # only core and this plugin
    plugins = build_plugin_manager(environ=environ)
    settings = load_gateway_settings(plugins, None, environ=environ)
    store = plugins.hook.gateway_make_store(settings=settings)
    assert isinstance(store, RedisStore)
    return store


@pytest.fixture
def store_from_environ() -> StoreFromEnviron:
    return _store_from_environ


@pytest.fixture
def store_factory(redis_url: str, unique: str) -> StoreFactory:
    """Stores on the test server with this test's key prefix; ``key=value`` sets [redis] keys."""

    def factory(**redis: str) -> RedisStore:
        values = {"url": redis_url, "key_prefix": unique} | redis
        return _store_from_environ(
            {f"GATEWAY_REDIS_{key.upper()}": value for key, value in values.items()}
        )

    return factory


@pytest.fixture
async def store(store_factory: StoreFactory) -> AsyncIterator[RedisStore]:
    async with store_factory() as entered:
        yield entered


@pytest.fixture
def redis_url(redis_deployment_url: str) -> str:
    """The store's contract is checked on one node, behind Sentinel and on a Cluster."""
    return redis_deployment_url
