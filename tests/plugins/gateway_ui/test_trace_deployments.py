"""The trace writer's script keeps to one hash slot per call, so it runs on one node, behind
Sentinel and on a Cluster alike: jobs of two scopes in one flush, and a reply that does not
name its scope written to the trace of its job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import anyio
import pytest

from gateway.app import load_gateway_settings
from gateway.jobstates import JobState
from gateway.plugins import build_plugin_manager
from gateway.resilience import Readiness, Resilience
from gateway.store import Store
from gateway_ui.settings import UiSettings
from gateway_ui.trace import TraceEntry, TraceKind, read_trace
from gateway_ui.trace_writer import TraceWriter

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def redis_url(redis_deployment_url: str) -> str:
    return redis_deployment_url


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[Store]:
    environ = {
        "GATEWAY_PLUGINS_ALLOW": "redis",
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": unique,
    }
    plugins = build_plugin_manager(environ)
    made: Store | None = plugins.hook.gateway_make_store(
        settings=load_gateway_settings(plugins, None, environ)
    )
    assert made is not None
    async with made as entered:
        yield entered


def stored(job: str, scope: str) -> TraceEntry:
    fields = {"method": "StoreAndStart", "previous": JobState.INITIAL, "current": "Running"}
    return TraceEntry(TraceKind.STATE, job, scope, fields)


async def test_jobs_of_two_scopes_and_a_reply_without_its_scope(store: Store) -> None:
    resilience = Resilience(Readiness(), minimum_seconds=0.01, maximum_seconds=0.1)
    gateway = SimpleNamespace(
        store=store, resilience=resilience, instance_id="i", stopping=anyio.Event()
    )
    writer = TraceWriter(UiSettings(), gateway)
    await store.client.sadd(store.keys.scopes(), "cell1", "cell2")
    writer.add(stored("J1", "cell1"))
    writer.add(stored("J2", "cell2"))
    await writer.flush()
    reply = {"correlation_id": "J2:a:1", "error": None, "data": {"nm": 1}}
    writer.add(TraceEntry(TraceKind.REPLY, "J2", None, reply))  # the equipment left it out
    await writer.flush()
    assert [e["kind"] for e in await read_trace(store, "cell1", "J1")] == ["state"]
    assert [e["kind"] for e in await read_trace(store, "cell2", "J2")] == ["state", "reply"]
    assert await read_trace(store, "cell1", "J2") == []
