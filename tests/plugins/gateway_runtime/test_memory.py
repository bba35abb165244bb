"""What an instance keeps in memory of jobs: the jobs in progress, on every instance.

Two instances on real Redis and mosquitto: a job's replies go through both, so both cache it;
once it ends both caches are empty (the instance that did not end it hears of the end on the
scope's status events). And the caches' limit follows the scopes' capacity.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.equipment import CorrelationId, EquipmentCommand, EquipmentReply
from gateway.jobstates import JobState
from gateway.testing import running, wait_until
from gateway.testing.equipment import NoAnswer, TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_runtime.memory import CAPACITY_MARGIN, Lru, cache_limit, ends_job
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe

SCOPE = "cell1"


def test_the_limit_is_twice_the_jobs_the_scopes_run_at_once() -> None:
    assert CAPACITY_MARGIN == 2
    assert cache_limit({"cell1": 1}, unlimited=100) == 2
    assert cache_limit({"cell1": 1, "cell2": 4}, unlimited=100) == 10
    # A scope that runs any number at once counts the setting; so does knowing no scope yet.
    assert cache_limit({"cell1": 0, "cell2": 3}, unlimited=100) == 106
    assert cache_limit({}, unlimited=100) == 100
    # Unless it runs more than half that many now: then twice the jobs it runs (a cache
    # smaller than the jobs in progress would read a job's state and recipe at every step).
    assert cache_limit({"cell1": 0, "cell2": 3}, unlimited=100, running={"cell1": 200}) == 406
    assert cache_limit({"cell1": 0}, unlimited=100, running={"cell1": 30}) == 100
    assert cache_limit({"cell1": 2}, unlimited=100, running={"cell1": 2}) == 4


def test_a_cache_keeps_at_most_its_limit_as_it_is_now() -> None:
    limit = 3
    cache: Lru[str, int] = Lru(lambda: limit)
    for index in range(5):
        cache.put(f"k{index}", index)
    assert list(cache) == ["k2", "k3", "k4"]
    assert cache.get("k2") == 2  # used: the newest now
    limit = 2  # a scope's capacity went down: the next insert trims to it
    cache.put("k5", 5)
    assert list(cache) == ["k2", "k5"]
    assert cache.pop("k2") == 2
    assert cache.pop("k2") is None
    assert len(cache) == 1


def test_a_job_is_done_with_its_memory_when_final_or_gone() -> None:
    done = {state for state in JobState if ends_job(state)}
    assert done == {JobState.COMPLETED, JobState.CLOSED, JobState.ABORTED, JobState.END}


@pytest.mark.anyio
@pytest.mark.integration
async def test_a_job_cached_on_two_instances_leaves_both_when_it_ends(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    equipment = TestEquipment()
    first = station_with(equipment, mqtt_url, redis_url, unique, GATEWAY_GATEWAY_INSTANCE_ID="a")
    second = station_with(equipment, mqtt_url, redis_url, unique, GATEWAY_GATEWAY_INSTANCE_ID="b")
    through = {"a0": first, "a1": second}  # the hub each action's reply goes to
    last: list[EquipmentCommand] = []  # a2: answered by the test once it has looked

    async def answer(command: EquipmentCommand) -> Any:
        action = CorrelationId.parse(command.correlation_id).step
        if action in through:
            reply = EquipmentReply(command.correlation_id, data={"ok": True}, scope=command.scope)
            await through[action].equipment.reply(reply)
        else:
            last.append(command)
        raise NoAnswer  # answered above, through the chosen instance, or later

    equipment.behaviours = {"bench": answer}
    memories = [gateway.state.get(Coordinator).memory for gateway in (first, second)]
    key = (SCOPE, "J1")
    async with running(first), running(second), connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, SCOPE)
        wm = work_master("WM1", linear_recipe(3), dataschema=DATASCHEMA)
        assert return_status(await mes.configure("workmaster", wm)) == 1
        stored = await mes.store(job_order("J1", work_masters=["WM1"]), method="StoreAndStart")
        assert return_status(stored) == 1
        # Each instance applied a reply of the job: each keeps its snapshot and its state.
        await wait_until(
            lambda: last and all(key in cache for memory in memories for cache in memory.caches)
        )
        for memory in memories:
            assert [key in cache for cache in memory.caches] == [True, True]
        # Both hear the scope's job ends from now on (followed within runtime.scope_poll_seconds
        # of adopting it; a job that ended before is looked up when its scope is followed).
        await wait_until(lambda: all(memory.followed == {SCOPE} for memory in memories))
        command = last[0]
        reply = EquipmentReply(command.correlation_id, data={"ok": True}, scope=command.scope)
        await first.equipment.reply(reply)
        assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
        await wait_until(lambda: all(not memory.jobs() for memory in memories))
        for memory in memories:
            assert [len(cache) for cache in memory.caches] == [0, 0]
            assert memory.limit == 2  # the scope runs one job at once (jobs.max_running_...)
