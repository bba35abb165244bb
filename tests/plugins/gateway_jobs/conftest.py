"""Fixtures for job management: a station on the real mosquitto and Redis, and a store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from gateway.app import load_gateway_settings
from gateway.plugins import build_plugin_manager
from gateway.store import Store
from gateway_jobs.testing import LocalJobs, Station, local_jobs


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def make_store(redis_url: str, key_prefix: str) -> Store:
    """The store the way the gateway builds it (the plugin hook), on the test server."""
    environ = {
        "GATEWAY_PLUGINS_ALLOW": "redis",
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": key_prefix,
    }
    plugins = build_plugin_manager(environ)
    settings = load_gateway_settings(plugins, None, environ)
    store: Store | None = plugins.hook.gateway_make_store(settings=settings)
    assert store is not None
    return store


@pytest.fixture
def store_factory(redis_url: str, unique: str) -> Callable[[], Store]:
    """More stores on this test's key prefix: other instances' connections."""
    return lambda: make_store(redis_url, unique)


@pytest.fixture
async def store(store_factory: Callable[[], Store]) -> AsyncIterator[Store]:
    async with store_factory() as entered:
        yield entered


@pytest.fixture
def jobs(store: Store) -> LocalJobs:
    return local_jobs(store)


@pytest.fixture
def redis_url(redis_deployment_url: str) -> str:
    """Job management is checked on one node, behind Sentinel and on a Cluster."""
    return redis_deployment_url
