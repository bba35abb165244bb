"""The MES view heals: the publisher republishes what the store or the broker lost, and a
publisher that wakes from a freeze publishes nothing once another one took over.

Real processes (``fault_station``): two ``gateway run`` instances (each runs a publisher; a lease
keeps one active), the simulated station, a private redis-server and mosquitto that the tests
restart with and without their data, and an MES reading the retained topics over MQTT.
"""

from __future__ import annotations

import re

import anyio
import pytest

from gateway.testing import wait_until
from gateway.testing.mes import MesClient, StateIndex
from gateway.testing.mqtt import connect_test_client
from tests.faults.conftest import (
    SCOPE,
    FaultStation,
    configure_rear_axle,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

HEAL_SECONDS = 10.0  # the bound: the MES view is right again within this
_ACTIVE = re.compile(r"MES publisher active: epoch ([0-9a-f]{16})")


async def completed_jobs(station: FaultStation, jobs: list[str]) -> StateIndex:
    """Run ``jobs`` to their end; the state index once it shows every one with its result."""
    async with station.mes() as line:
        await configure_rear_axle(line)
        await store_jobs(line, jobs)
        await wait_for_all_ended(line, jobs)
    async with connect_test_client(station.mqtt_url) as client:
        mes = MesClient(client, station.name, SCOPE)
        seen = await mes.follow(lambda index: set(jobs) <= with_results(index), timeout=15)
    return seen[-1][0]


def with_results(index: StateIndex) -> set[str]:
    return {job.job_order_id for job in index.jobs if job.has_result}


async def test_mosquitto_restarted_with_and_without_persistence_loses_no_result(
    fault_station: FaultStation,
) -> None:
    station = fault_station
    await station.start()
    jobs = ["M1", "M2", "M3"]
    await completed_jobs(station, jobs)
    config = station.broker.directory / "mosquitto.conf"
    persistent = (
        config.read_text() + f"persistence true\npersistence_location {station.broker.directory}/\n"
    )
    for kind in ("without persistence", "switched to persistence", "with persistence"):
        if kind == "switched to persistence":
            config.write_text(persistent)
        station.broker.restart()
        async with connect_test_client(station.mqtt_url) as client:
            mes = MesClient(client, station.name, SCOPE)
            with anyio.fail_after(HEAL_SECONDS):
                results = await mes.retained("result", jobs, timeout=HEAL_SECONDS)
                index = await mes.index(timeout=HEAL_SECONDS)
        assert results.keys() == set(jobs), kind
        assert all(result["JobOrderID"] == job for job, result in results.items())
        assert index is not None, kind
        assert with_results(index) == set(jobs), kind
        assert set(station.running().values()) == {None}, kind
        await station.wait_ready()  # every instance reconnected

    # The broker works for the MES again: a new job completes and is published.
    assert await completed_jobs(station, ["M4"]) is not None


async def test_a_publisher_frozen_past_its_lease_publishes_nothing_when_it_wakes(
    fault_station: FaultStation,
) -> None:
    station = fault_station
    station.environ["GATEWAY_PUBLISHER_LEASE_SECONDS"] = "3"
    await station.start()
    seen: list[StateIndex] = []

    async with connect_test_client(station.mqtt_url) as client:
        mes = MesClient(client, station.name, SCOPE)
        async with anyio.create_task_group() as tasks:

            def record(index: StateIndex) -> bool:
                seen.append(index)
                return False  # every index, until cancelled

            async def watch() -> None:
                await mes.follow(record, timeout=120)

            tasks.start_soon(watch)
            async with station.mes() as line:
                await configure_rear_axle(line)
                await store_jobs(line, ["F1", "F2"])
                await wait_for_all_ended(line, ["F1", "F2"])
            await wait_until(lambda: seen and {"F1", "F2"} <= with_results(seen[-1]), timeout=15)
            # The active publisher is the one whose term published the latest index.
            first_epoch = seen[-1].epoch
            frozen, other = sorted(
                station.gateways.values(),
                key=lambda process: f"active: epoch {first_epoch}" not in process.log.read_text(),
            )
            frozen.freeze()
            try:
                # Past its lease: the other instance takes over and publishes its index.
                await wait_until(lambda: _ACTIVE.search(other.log.read_text()), timeout=15)
                await wait_until(lambda: seen[-1].epoch != first_epoch, timeout=15)
            finally:
                frozen.thaw()
            async with station.mes() as line:
                await store_jobs(line, ["F3"])
                await wait_for_all_ended(line, ["F3"])
            final = await mes.follow(
                lambda index: {"F1", "F2", "F3"} <= with_results(index), timeout=15
            )
            await wait_until(lambda: "back to standby" in frozen.log.read_text(), timeout=30)
            tasks.cancel_scope.cancel()

    indexes = [*seen, final[-1][0]]
    seqs = [index.seq for index in indexes]
    assert seqs == sorted(seqs), "seq went backwards: two publishers interleaved"
    assert first_epoch in {index.epoch for index in indexes}
    # Once the next term published, the frozen one's epoch never shows up again.
    term = next(i for i, index in enumerate(indexes) if index.epoch == first_epoch)
    takeover = next(i for i in range(term, len(indexes)) if indexes[i].epoch != first_epoch)
    assert all(index.epoch != first_epoch for index in indexes[takeover:])
    assert frozen.returncode is None  # it keeps running, as a standby
