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
    assert await earlier.next_seq("cell1") == 1
    await earlier.commit(batch("cell1", "1-0", "J1"))

    await later.draw_fence()
    await later.claim("cell1")  # e.g. while the earlier one was frozen
    with pytest.raises(Fenced):
        await earlier.next_seq("cell1")
    with pytest.raises(Fenced):
        await earlier.commit(batch("cell1", "2-0", "J2"))
    with pytest.raises(Fenced):
        await earlier.claim("cell1")

    assert await later.next_seq("cell1") == 2
    await later.commit(batch("cell1", "2-0", "J2"))
    state = await later.load("cell1")
    assert state.cursor == "2-0"
    assert [entry.job_order_id for entry in state.index] == ["J1", "J2"]
    assert (await later.retained("cell1")).keys() == {"result/J1", "result/J2"}


async def test_a_store_that_lost_the_publishers_state_is_noticed(store: Store) -> None:
    publisher = PublisherStore(store)
    await publisher.draw_fence()
    await publisher.claim("cell1")
    assert await publisher.next_seq("cell1") == 1
    await store.client.delete(publisher.key("cell1", "fence"), publisher.key("cell1", "seq"))
    with pytest.raises(StoreLost):
        await publisher.next_seq("cell1")
    with pytest.raises(StoreLost):
        await publisher.commit(batch("cell1", "1-0", "J1"))
    await publisher.claim("cell1")  # the next term claims it again
    assert await publisher.next_seq("cell1", at_least=7) == 8  # seq goes on from the last one
