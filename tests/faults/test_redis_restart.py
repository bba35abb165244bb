"""Redis killed (SIGKILL) under load and back, with its AOF or without any data.

Two gateway instances and the simulated station run 50 rear-axle jobs; Redis is killed while
they run. Back after 3 s with its AOF (the MES still storing jobs meanwhile): no gateway exits,
both report not ready (``/readyz`` 503, the HTTP endpoint answering all along) during the outage
and ready after it, every job ends Completed exactly once, and a job started afterwards
completes too. Back without its data: no gateway exits, the retained state index gets a new
epoch listing what the store still holds within 10 s, and a job started afterwards completes.
"""

from __future__ import annotations

import shutil
import time

import anyio
import pytest

from gateway.testing.mes import MesClient
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import ServerProcess
from gateway_jobs.testing import state_texts

from .conftest import (
    SCOPE,
    FaultStation,
    configure_rear_axle,
    endings,
    poll_until,
    store_jobs,
    wait_for_all_ended,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

JOBS = [f"J{number}" for number in range(50)]
OUTAGE_SECONDS = 3.0
HEAL_SECONDS = 10.0  # the bound: the MES view is right again within this


async def test_redis_killed_and_back_after_3_s_loses_no_job(fault_station: FaultStation) -> None:
    station = fault_station
    await station.start()
    active = f"{station.name}:{{{SCOPE}}}:rt:active"
    async with station.mes() as mes:
        await configure_rear_axle(mes)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(store_jobs, mes, JOBS)
            async with station.store() as client:

                async def running() -> bool:
                    return bool(await client.scard(active) >= 5)

                await poll_until(running, timeout=60)  # jobs are running

            station.redis.kill()
            killed = time.monotonic()
            # The HTTP endpoints stay up and say why they are not ready.
            for instance in station.gateways:
                with anyio.fail_after(20):
                    while (answer := await station.readyz(instance))[0] != 503:
                        assert answer[0] != 0, f"{instance}: /readyz did not answer"
                        await anyio.sleep(0.05)
                body = answer[1]
                assert body["checks"]["store"] is False, body
            await anyio.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - killed)))
            assert all(code is None for code in station.running().values()), station.running()
            station.redis.start()  # same port, same directory: the AOF is loaded again
            await station.wait_ready()
        responses = await wait_for_all_ended(mes, JOBS)

        await store_jobs(mes, ["after"])
        after = await wait_for_all_ended(mes, ["after"])

    assert all(code is None for code in station.running().values()), station.running()
    for job, response in {**responses, **after}.items():
        assert state_texts(response)[:2] == ["Ended", "Completed"], (job, response)
    ended = await endings(station)
    assert ended == dict.fromkeys([*JOBS, "after"], 1), ended
    for process in station.gateways.values():
        log = process.log.read_text(errors="replace")
        assert " back after " in log  # each outage is logged once, and its end once


def forget_everything(redis: ServerProcess) -> None:
    """What a restart without persistence leaves: the server's AOF and snapshot removed, so
    the next ``start`` begins empty (on the same port)."""
    # Redis 7 keeps its AOF in a directory, older ones in one file.
    for path in [*redis.directory.glob("appendonly*"), redis.directory / "dump.rdb"]:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


async def test_redis_back_without_its_data_heals_the_index_and_runs_new_jobs(
    fault_station: FaultStation,
) -> None:
    station = fault_station
    await station.start()
    active = f"{station.name}:{{{SCOPE}}}:rt:active"
    async with station.mes() as line, connect_test_client(station.mqtt_url) as client:
        mes = MesClient(client, station.name, SCOPE)
        await configure_rear_axle(line)
        await store_jobs(line, JOBS)
        before = await mes.index(timeout=10)
        assert before is not None
        async with station.store() as store:
            assert await store.scard(active) >= 5  # under load: jobs are running

        station.redis.kill()
        forget_everything(station.redis)
        station.redis.start()
        restarted = time.monotonic()
        # The MES is told: a new epoch, listing what the store still has (nothing).
        healed = await mes.follow(lambda index: index.epoch != before.epoch, timeout=HEAL_SECONDS)
        assert time.monotonic() - restarted < HEAL_SECONDS
        assert healed[-1][1].kind == "restart"
        assert healed[-1][0].jobs == (), healed[-1][0]
        assert all(code is None for code in station.running().values()), station.running()
        await station.wait_ready()

        # The store lost the Work Master too: the MES configures it again, and a new job runs.
        await configure_rear_axle(line)
        await store_jobs(line, ["after"])
        after = await wait_for_all_ended(line, ["after"])
        final = await mes.follow(lambda index: index.job("after") is not None, timeout=15)

    assert state_texts(after["after"])[:2] == ["Ended", "Completed"], after
    assert final[-1][0].epoch == healed[-1][0].epoch
    assert {job.job_order_id for job in final[-1][0].jobs} == {"after"}
    assert all(code is None for code in station.running().values()), station.running()
