"""Fencing of the publisher's writes: a stale term writes nothing, a lost store is noticed."""

from __future__ import annotations

import pytest

from gateway.store import Store
from gateway_publisher.batch import Batch
from gateway_publisher.index import IndexEntry, JobIndex
from gateway_publisher.persistence import Fenced, PublisherStore, StoreLost

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def batch(scope: str, last_id: str, job: str) -> Batch:
    change = Batch(scope, JobIndex(), last_id=last_id)
    change.change(job, IndexEntry(job, "Ended.Completed", has_result=True))
    change.topics[("result", job)] = b'{"JobOrderID":"%s"}' % job.encode()
    return change


async def test_a_later_term_fences_off_the_earlier_one(store: Store) -> None:
    earlier, later = PublisherStore(store), PublisherStore(store)
    await earlier.draw_fence()
    await earlier.claim("cell1")
    assert await earlier.reserve("cell1", 1) == 1
    await earlier.commit(batch("cell1", "1-0", "J1"))

    await later.draw_fence()
    await later.claim("cell1")  # e.g. while the earlier one was frozen
    with pytest.raises(Fenced):
        await earlier.reserve("cell1", 2)
    with pytest.raises(Fenced):
        await earlier.commit(batch("cell1", "2-0", "J2"))
    with pytest.raises(Fenced):
        await earlier.claim("cell1")

    # Above what the earlier term reserved (2): it may have published that one.
    assert await later.reserve("cell1", 1) == 3
    await later.commit(batch("cell1", "2-0", "J2"))
    state = await later.load("cell1")
    assert state.cursor == "2-0"
    assert [entry.job_order_id for entry in state.index] == ["J1", "J2"]
    assert (await later.retained("cell1")).keys() == {"result/J1", "result/J2"}


async def test_a_store_that_lost_the_publishers_state_is_noticed(store: Store) -> None:
    publisher = PublisherStore(store)
    await publisher.draw_fence()
    await publisher.claim("cell1")
    assert await publisher.reserve("cell1", 1) == 1
    await store.client.delete(publisher.key("cell1", "fence"), publisher.key("cell1", "seq"))
    with pytest.raises(StoreLost):
        await publisher.reserve("cell1", 2)
    with pytest.raises(StoreLost):
        await publisher.commit(batch("cell1", "1-0", "J1"))
    await publisher.claim("cell1")  # the next term claims it again
    assert await publisher.reserve("cell1", 1, at_least=7) == 8  # on from the last published


async def test_each_commit_reserves_the_next_index_number(store: Store) -> None:
    """Within a term the numbers run on one by one, the next one persisted by the commit of
    the batch before (so an index costs no script of its own); a term that follows a crash
    starts above every number the dead one may have published."""
    publisher = PublisherStore(store)
    await publisher.draw_fence()
    await publisher.claim("cell1")
    state = await publisher.load("cell1")
    handed: list[int] = []
    for number in range(1, 4):
        handed.append(await publisher.next_seq(state))
        reserve = state.to_reserve
        committed = batch("cell1", f"{number}-0", f"J{number}")
        await publisher.commit(committed, reserve)
        state.committed(committed, reserve)
        assert await store.client.get(publisher.key("cell1", "seq")) == str(number + 1)
    assert handed == [1, 2, 3]
    # The index with 4 is published (the number was persisted), then the publisher dies.
    assert await publisher.next_seq(state) == 4

    later = PublisherStore(store)
    await later.draw_fence()
    await later.claim("cell1")
    restarted = await later.load("cell1")
    assert restarted.cursor == "3-0"
    assert await later.next_seq(restarted) == 5  # never 4 again
