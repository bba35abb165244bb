"""``gateway store usage`` against a real redis-server: keys by kind, what an ended job costs."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.testing.cli import command_environ, run_gateway
from gateway.testing.services import redis_server, running
from gateway_redis import RedisStore
from gateway_redis.settings import RedisSettings
from gateway_redis.usage import kind_of, measure, render

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

StoreFactory = Callable[..., RedisStore]


def test_a_key_is_grouped_by_its_name_without_the_last_part() -> None:
    assert kind_of("gw:{cell1}:rt:exec:J1", "gw") == ("rt:exec", "J1")
    assert kind_of("gw:{cell1}:dedupe:ab12", "gw") == ("dedupe", "ab12")
    assert kind_of("gw:{_global}:scopes", "gw") == ("scopes", "scopes")
    assert kind_of("gw:{a/b}:trace:J:1", "gw") == ("trace:J", "1")
    assert kind_of("other:{cell1}:x", "gw") is None
    assert kind_of("gw:nobrace", "gw") is None


async def fill(client: Redis, prefix: str) -> None:
    """Two ended jobs (trace and engine state expiring), one running (kept), markers."""
    for job in ("J1", "J2"):
        await client.set(f"{prefix}:{{cell1}}:rt:exec:{job}", "x" * 500, ex=600)
        await client.xadd(f"{prefix}:{{cell1}}:trace:{job}", {"kind": "state", "fields": "{}"})
        await client.expire(f"{prefix}:{{cell1}}:trace:{job}", 300)
    await client.set(f"{prefix}:{{cell1}}:rt:exec:J3", "x" * 500)  # running: no TTL
    await client.xadd(f"{prefix}:{{cell1}}:trace:J3", {"kind": "state", "fields": "{}"})
    for number in range(4):
        await client.set(f"{prefix}:{{cell1}}:dedupe:{number:064x}", "{}", ex=900)
    await client.set(f"{prefix}:{{cell1}}:workmaster:WM", "{}")


async def test_usage_counts_kinds_and_divides_what_expires_by_the_ended_jobs(
    store_factory: StoreFactory, unique: str
) -> None:
    async with store_factory() as store:
        await fill(store.client, unique)
        usage = await measure(store.client, unique)
    kinds = {kind.kind: kind for kind in usage.kinds}
    assert {name: (k.keys, k.expiring) for name, k in kinds.items()} == {
        "rt:exec": (3, 2),
        "trace": (3, 2),
        "dedupe": (4, 4),
        "workmaster": (1, 0),
        "schema": (1, 0),  # the store's layout version, written when the store is entered
    }
    assert 590 <= (kinds["rt:exec"].ttl_most or 0) <= 600
    assert kinds["workmaster"].ttl_most is None
    assert all(kind.bytes > 0 for kind in usage.kinds)
    # J1 and J2 are held (two expiring kinds each); J3 runs, the markers are digests.
    assert usage.jobs_held == 2
    per_job = usage.per_job()
    assert per_job is not None
    assert per_job["keys"] == 4.0  # (2 + 2 + 4) / 2
    assert per_job["kept_seconds"] == 900
    assert per_job["bytes"] == round(usage.expiring_bytes / 2)


async def test_the_command_prints_the_usage_and_the_retention_settings(tmp_path: Path) -> None:
    with running(redis_server(tmp_path)) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        async with Redis.from_url(url, decode_responses=True) as client:
            await fill(client, "gw")
            usage = await measure(client, "gw")
        environ = command_environ(GATEWAY_REDIS_URL=url, GATEWAY_REDIS_DEDUPE_TTL_SECONDS="900")
        done = run_gateway("store", "usage", "--json", environ=environ)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["ended_jobs_held"] == 2
    assert figures["per_job"]["keys"] == 4.0
    assert figures["retention"]["redis.dedupe_ttl_seconds"] == 900
    assert figures["retention"]["ui.trace_kept_seconds"] == 86400

    usage.retention = {"redis.dedupe_ttl_seconds": 900}
    text = render(usage, "redis://here")
    assert text.startswith("store redis://here: ")
    assert "no memory budget (maxmemory 0)" in text
    assert re.search(r"an ended job: 4.0 keys, .*, kept up to (8\d\d|900) s \(2 ended", text)
    assert "retention: redis.dedupe_ttl_seconds = 900" in text


def test_the_command_says_why_when_redis_cannot_be_reached() -> None:
    environ = command_environ(GATEWAY_REDIS_URL="redis://127.0.0.1:1/0")
    done = run_gateway("store", "usage", environ=environ)
    assert done.returncode == 1
    assert done.stderr.startswith("gateway store usage: ")
    assert "cannot connect to Redis at redis://127.0.0.1:1/0" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_server_that_may_evict_live_state_is_named_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    arguments = ["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]
    with running(redis_server(tmp_path, arguments=arguments)) as server:
        settings = RedisSettings(url=f"redis://127.0.0.1:{server.port}/0")
        with caplog.at_level(logging.WARNING, logger="gateway_redis.store"):
            async with RedisStore(settings, tmp_path) as store:
                assert await store.ping()
    [said] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "evicts any key when its memory is full (maxmemory-policy allkeys-lru)" in said
