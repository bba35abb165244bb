"""What the publisher costs in Redis commands (issue 37): one read and one script per batch of
changes, and the changes of a busy spell in one batch.

The gateway here runs the publisher alone, on a redis-server of this module's own, so the
server's command counts (INFO commandstats) are the publisher's. The test writes the change
records itself, as job management would (one transaction, one record per change).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from gateway.changes import ChangeRecord, ReadPace, Trigger
from gateway.jobstates import JobState
from gateway.store import Store
from gateway.testing import HeldPauses, running, wait_until
from gateway.testing.services import ServerProcess, redis_server
from tests.plugins.gateway_publisher.conftest import make_store

if TYPE_CHECKING:
    from tests.plugins.gateway_publisher.conftest import Rig

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A redis-server for this module's tests alone (one at a time: counts are theirs)."""
    server = redis_server(tmp_path_factory.mktemp("publisher-redis")).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(own_redis: ServerProcess) -> str:
    return f"redis://127.0.0.1:{own_redis.port}/0"


def stored(job: str) -> ChangeRecord:
    return ChangeRecord(
        Trigger.STORE,
        SCOPE,
        job,
        JobState.NOT_ALLOWED_TO_START_READY,
        JobState.INITIAL,
        priority=0,
        has_result=False,
        job_order=f'{{"JobOrderID":"{job}"}}',
    )


async def write(store: Store, *jobs: str) -> None:
    """One record per job, all in one transaction (as a burst reaches the stream)."""
    async with store.transaction(SCOPE) as transaction:
        for job in jobs:
            transaction.append_change(stored(job))


async def calls(store: Store, name: str) -> int:
    stats = await store.client.info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


async def test_a_batch_of_changes_costs_one_script(rig: Rig, redis_url: str) -> None:
    async with make_store(redis_url, rig.station.name) as store:
        gateway = rig.gateway("p", role="publisher")
        async with running(gateway), rig.mes() as mes:
            await wait_until(lambda: rig.service.term is not None)
            await write(store, "j0")  # the scope's first batch: its number is reserved first
            await mes.follow(lambda index: index.job("j0") is not None)
            await wait_until(lambda: rig.service.stats.batches == 1)

            await store.client.config_resetstat()
            await write(store, *(f"j{number}" for number in range(1, 6)))
            seen = await mes.follow(lambda index: len(index.jobs) == 6)
            await wait_until(lambda: rig.service.stats.batches == 2)
            # The write's own commit (one script call), then the publisher's commit, its
            # index's seq included.
            assert await calls(store, "evalsha") == 2

            await store.client.config_resetstat()
            await write(store, "j6")
            seen += await mes.follow(lambda index: len(index.jobs) == 7)
            await wait_until(lambda: rig.service.stats.batches == 3)
            assert await calls(store, "evalsha") == 2
    assert rig.service.stats.records == 7
    seqs = [index.seq for index, _ in seen]
    assert seqs == sorted(seqs)
    assert {gap.kind for _, gap in seen[1:]} <= {"none", "stale"}  # nothing missed in between


async def test_changes_that_come_while_the_reader_pauses_make_one_batch(
    rig: Rig, redis_url: str
) -> None:
    """Three changes, three transactions, written while the publisher keeps its pace after
    a change: one read, one index, one script."""
    async with make_store(redis_url, rig.station.name) as store:
        publisher = rig.gateway("p", role="publisher")
        async with running(publisher), rig.mes() as mes:
            await wait_until(lambda: rig.service.term is not None)
            await write(store, "j0")
            await wait_until(lambda: rig.service.stats.batches == 1)
            term = rig.service.term
            assert term is not None
            pauses = HeldPauses()
            term.pace = ReadPace(60.0, clock=lambda: 0.0, sleep=pauses)
            await write(store, "j1")
            await wait_until(lambda: len(pauses.held) == 1 and rig.service.stats.batches == 2)

            await store.client.config_resetstat()
            for job in ("j2", "j3", "j4"):
                await write(store, job)
            pauses.end()
            await wait_until(lambda: len(pauses.held) == 2)  # pausing again: no read meanwhile
            await mes.follow(lambda index: len(index.jobs) == 5)
            assert rig.service.stats.batches == 3
            assert await calls(store, "xread") == 1
            assert await calls(store, "evalsha") == 3 + 1  # the writes' commits, the publisher's
            pauses.end()
