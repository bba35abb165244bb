"""The engine's commit script, on every Redis deployment: the compare-and-swap of a job's state.

The script reads the stored version off the head of the document instead of decoding all of
it; these tests pin that the version it compares is the document's own, whatever the job id
holds, and that a document of another shape is still compared by its version.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.formats import Execution, Status
from gateway.testing.redis_ha import redis_client
from gateway_runtime.scripts import COMMIT
from gateway_runtime.state import dump_execution

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


NAMES = (
    "exec",
    "work",
    "timers",
    "waiting",
    "active",
    "outbox",
    "unclaimed",
    "recipe",
    "history",
)


def keys(unique: str) -> list[str]:
    """The nine keys of one commit, in one hash slot (Cluster) as the engine's are."""
    return [f"{{{unique}}}:{name}" for name in NAMES]


def ops(job: str, take: str | None, history: list[list[str]] | None = None, ttl: int = 0) -> str:
    follow_ups: dict[str, Any] = {
        "work": [],
        "cancel": [],
        "timers": [],
        "done": [],
        "outbox": [],
        "waiting": False,
        "active": True,
        "job": job,
        "now": 0,
        "ttl": ttl,
        "history": history or [],
    }
    if take is not None:
        follow_ups["take"] = take
    return json.dumps(follow_ups)


async def commit_to(
    client: Any,
    names: list[str],
    expected: int,
    document: str,
    job: str,
    take: str | None = None,
    *,
    snapshot: str = "{}",
    run: str = "",
) -> int:
    arguments = (expected, document, ops(job, take), snapshot, run)
    return int(await client.eval(COMMIT, len(names), *names, *arguments))


async def commit(
    client: Any, unique: str, expected: int, document: str, job: str, *, run: str = ""
) -> int:
    return await commit_to(client, keys(unique), expected, document, job, run=run)


async def test_a_commit_applies_only_to_the_version_it_read(redis_url: str, unique: str) -> None:
    job = "J-1"
    async with redis_client(redis_url) as client:
        first = dump_execution(Execution(scope="cell", job=job, version=0))
        assert await commit(client, unique, -1, first, job) == 1
        assert await commit(client, unique, -1, first, job) == 0  # created once only

        second = dump_execution(Execution(scope="cell", job=job, version=1))
        assert await commit(client, unique, 1, second, job) == 0  # stale: it holds 0
        assert await commit(client, unique, 0, second, job) == 1
        assert await client.get(keys(unique)[0]) == second
        assert await commit(client, unique, 0, second, job) == 0  # 0 is gone now


async def test_a_version_spelled_inside_the_job_id_is_not_taken_for_the_documents(
    redis_url: str, unique: str
) -> None:
    job = 'J","version":7,"x":"'
    async with redis_client(redis_url) as client:
        stored = dump_execution(Execution(scope="cell", job=job, version=2))
        assert await commit(client, unique, -1, stored, job) == 1
        assert await commit(client, unique, 7, stored, job) == 0
        assert await commit(client, unique, 2, stored, job) == 1


async def test_a_document_of_another_shape_is_compared_by_its_version(
    redis_url: str, unique: str
) -> None:
    job = "J-2"
    async with redis_client(redis_url) as client:
        reordered = json.dumps({"version": 4, "run": "", "job": job, "scope": "cell"})
        await client.set(keys(unique)[0], reordered)
        assert await commit(client, unique, 3, reordered, job) == 0
        assert await commit(client, unique, 4, reordered, job) == 1


async def test_a_kept_event_is_taken_with_the_change_that_applies_it_and_only_once(
    redis_url: str, unique: str
) -> None:
    # Taking the event and committing its effect are one script: a failure between the two
    # (a failover) can neither lose the event nor leave it to be taken twice.
    first, second = keys(unique), keys(unique)
    second[0] = f"{{{unique}}}:exec-2"  # another job's document, the same kept events
    kept = first[6]
    async with redis_client(redis_url) as client:
        await client.lpush(kept, "event-1", "event-2")
        for job, names in (("J-1", first), ("J-2", second)):
            created = dump_execution(Execution(scope="cell", job=job, version=0))
            assert await commit_to(client, names, -1, created, job) == 1

        one = dump_execution(Execution(scope="cell", job="J-1", version=1))
        assert await commit_to(client, first, 5, one, "J-1", take="event-1") == 0  # stale
        assert await client.lrange(kept, 0, -1) == ["event-2", "event-1"]  # still kept
        assert await commit_to(client, first, 0, one, "J-1", take="event-1") == 1
        assert await client.lrange(kept, 0, -1) == ["event-2"]

        two = dump_execution(Execution(scope="cell", job="J-2", version=1))
        assert await commit_to(client, second, 0, two, "J-2", take="event-1") == -1  # gone
        assert await client.get(second[0]) == dump_execution(  # nothing written
            Execution(scope="cell", job="J-2", version=0)
        )
        assert await client.lrange(kept, 0, -1) == ["event-2"]


async def test_a_state_is_created_with_its_snapshot_over_an_earlier_runs_ended_one_only(
    redis_url: str, unique: str
) -> None:
    # The snapshot is written with the first state: a start that fails before leaves none. A
    # job id cleared and stored again (another run) replaces the earlier run's ended state,
    # snapshot and history; a start of the same run handled twice does not run it again.
    job, names = "J-3", keys(unique)

    async def create(run: str, snapshot: str) -> int:
        document = dump_execution(Execution(scope="cell", job=job, version=0, run=run))
        return await commit_to(client, names, -1, document, job, snapshot=snapshot, run=run)

    async with redis_client(redis_url) as client:
        await client.hset(names[8], "a0", "{}")  # the earlier run's history
        assert await create("r1", "s1") == 1
        assert await client.get(names[7]) == "s1"
        assert await client.exists(names[8]) == 0
        assert await create("r2", "s2") == 0  # a running job is not replaced
        assert await client.get(names[7]) == "s1"

        ended = Execution(scope="cell", job=job, version=1, run="r1", status=Status.ENDED)
        assert await commit(client, unique, 0, dump_execution(ended), job, run="r1") == 1
        assert await create("r1", "s1") == 0  # the same run, started twice: it ended
        assert await create("r2", "s2") == 1
        assert await client.get(names[7]) == "s2"
        assert await client.get(names[0]) == dump_execution(
            Execution(scope="cell", job=job, version=0, run="r2")
        )


async def test_a_state_read_from_an_earlier_run_of_the_job_id_is_not_written(
    redis_url: str, unique: str
) -> None:
    # The runs of a job id count their versions from 0 each: the run tells them apart.
    job = "J-4"
    async with redis_client(redis_url) as client:
        created = dump_execution(Execution(scope="cell", job=job, version=0, run="r2"))
        assert await commit(client, unique, -1, created, job) == 1
        written = dump_execution(Execution(scope="cell", job=job, version=1, run="r2"))
        assert await commit(client, unique, 0, written, job, run="r1") == 0
        assert await commit(client, unique, 0, written, job, run="r2") == 1


async def test_the_runs_done_go_to_the_history_which_goes_with_the_state(
    redis_url: str, unique: str
) -> None:
    job = "J-1"
    names = keys(unique)
    async with redis_client(redis_url) as client:
        await client.hset(names[8], "old", "{}")  # an earlier job's of the same id
        document = dump_execution(Execution(scope="cell", job=job, version=0))
        created = (-1, document, ops(job, None, [["a1", '{"name":"a1"}']]), "{}", "")
        assert await client.eval(COMMIT, len(names), *names, *created) == 1
        assert await client.hgetall(names[8]) == {"a1": '{"name":"a1"}'}
        assert await client.ttl(names[8]) == -1  # kept while the job runs
        ended = dump_execution(Execution(scope="cell", job=job, version=1))
        last = (0, ended, ops(job, None, [["a2", '{"name":"a2"}']], ttl=60), "", "")
        assert await client.eval(COMMIT, len(names), *names, *last) == 1
        assert set(await client.hgetall(names[8])) == {"a1", "a2"}
        for key in (names[0], names[7], names[8]):  # state, recipe snapshot, history
            assert 0 < await client.ttl(key) <= 60


BOOKKEEPING = ("bp", "bp-wm", "parked-jobs", "parked")


def start_ops(job: str, earlier: str, marks: list[str]) -> str:
    return json.dumps({**json.loads(ops(job, None)), "earlier": earlier, "marks": marks})


async def test_a_start_checks_the_earlier_run_and_the_breakpoints_and_unparks_in_its_create(
    redis_url: str, unique: str
) -> None:
    # A start is one script: it reads neither the earlier run's state nor the breakpoints
    # first, but says when they are not what it assumed (none), and only then are they read.
    job = "J-5"
    names = keys(unique) + [f"{{{unique}}}:{name}" for name in BOOKKEEPING]
    parked_jobs = names[11]

    async def create(run: str, earlier: str, marks: list[str]) -> int:
        document = dump_execution(Execution(scope="cell", job=job, version=0, run=run))
        arguments = (-1, document, start_ops(job, earlier, marks), "{}", run)
        return int(await client.eval(COMMIT, len(names), *names, *arguments))

    async with redis_client(redis_url) as client:
        await client.sadd(parked_jobs, job, "J-other")
        await client.sadd(names[9], "s1")  # the job's own breakpoint
        await client.sadd(names[10], "s2")  # its Work Master's
        assert await create("r1", "", []) == -4
        assert await create("r1", "", ["s1"]) == -4
        assert await client.exists(names[0]) == 0  # nothing written
        assert await client.smembers(parked_jobs) == {job, "J-other"}
        assert await create("r1", "", ["s2", "s1"]) == 1
        assert await client.smembers(parked_jobs) == {"J-other"}  # parked no more

        assert await create("r2", "", ["s1", "s2"]) == -2  # r1 runs: tried again later
        ended = Execution(scope="cell", job=job, version=1, run="r1", status=Status.ENDED)
        assert await commit(client, unique, 0, dump_execution(ended), job, run="r1") == 1
        assert await create("r1", "", ["s1", "s2"]) == 0  # the same run, started twice
        assert await create("r2", "", ["s1", "s2"]) == -3  # built on no earlier state: read it
        assert await create("r2", "r1", ["s1", "s2"]) == 1


async def test_the_end_forgets_the_jobs_breakpoints_parking_and_kept_events_with_it(
    redis_url: str, unique: str
) -> None:
    job = "J-6"
    names = keys(unique) + [f"{{{unique}}}:{name}" for name in BOOKKEEPING]
    kept = names[6]
    async with redis_client(redis_url) as client:
        created = dump_execution(Execution(scope="cell", job=job, version=0))
        assert await commit_to(client, names, -1, created, job) == 1
        await client.sadd(names[9], "s1")
        await client.sadd(names[10], "s2")  # the Work Master's: its other jobs keep it
        await client.sadd(names[11], job, "J-other")
        await client.set(names[12], "{}")
        mine = json.dumps({"id": "e1", "job_order_id": job})
        others = [json.dumps({"id": "e2", "job_order_id": "J-other"}), json.dumps({"id": "e3"})]
        await client.lpush(kept, mine, *others, mine.replace("e1", "e4"), "not json")

        ended = dump_execution(Execution(scope="cell", job=job, version=1, status=Status.ENDED))
        closing = json.dumps({**json.loads(ops(job, None, ttl=60)), "forget": True})
        answer = await client.eval(COMMIT, len(names), *names, 0, ended, closing, "", "")
        assert answer == [1, 2]  # written, two events kept for it dropped
        assert await client.exists(names[9], names[12]) == 0
        assert await client.smembers(names[10]) == {"s2"}
        assert await client.smembers(names[11]) == {"J-other"}
        assert sorted(await client.lrange(kept, 0, -1)) == sorted([*others, "not json"])
