"""De-duplication of incoming CloudEvents against a real redis-server."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway_redis import RedisStore

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

StoreFactory = Callable[..., RedisStore]  # the ``store_factory`` fixture


def command(**changes: str) -> CloudEvent:
    event = CloudEvent(
        type="org.example.Start.v1", source="urn:mes", subject="cell-1", data={"JobOrderID": "J1"}
    )
    return event.replace(**changes)


def replies_to(event: CloudEvent) -> list[CloudEvent]:
    return [
        event.reply(source="urn:station-gateway:a", data={"ReturnStatus": 0}),
        event.reply(source="urn:station-gateway:a", data=b"\x01\x02").replace(
            datacontenttype="application/octet-stream"
        ),
    ]


async def test_new_then_busy_then_duplicate_with_the_same_replies(store: RedisStore) -> None:
    event = command()
    assert (await store.dedupe.claim(event)).new
    assert (await store.dedupe.claim(event)).busy  # a redelivery while the first is handled
    replies = replies_to(event)
    await store.dedupe.complete(event, replies)
    claim = await store.dedupe.claim(event)
    assert claim.duplicate
    assert list(claim.replies) == replies


async def test_duplicate_without_replies(store: RedisStore) -> None:
    event = command()
    await store.dedupe.claim(event)
    await store.dedupe.complete(event, [])
    claim = await store.dedupe.claim(event)
    assert claim.duplicate
    assert list(claim.replies) == []


async def test_events_differ_by_source_and_id(store: RedisStore) -> None:
    event = command(id="e-1")
    assert (await store.dedupe.claim(event)).new
    assert (await store.dedupe.claim(command(id="e-2"))).new
    assert (await store.dedupe.claim(command(id="e-1", source="urn:other-mes"))).new


async def test_release_after_a_failure_lets_the_redelivery_be_processed(
    store: RedisStore,
) -> None:
    event = command()
    assert (await store.dedupe.claim(event)).new
    await store.dedupe.release(event)
    assert (await store.dedupe.claim(event)).new


async def test_release_leaves_done_markers_and_other_instances_claims(
    store: RedisStore, store_factory: StoreFactory
) -> None:
    done, theirs = command(id="done"), command(id="theirs")
    await store.dedupe.claim(done)
    await store.dedupe.complete(done, [])
    await store.dedupe.release(done)
    assert (await store.dedupe.claim(done)).duplicate
    async with store_factory() as other:
        assert (await other.dedupe.claim(theirs)).new
        await store.dedupe.release(theirs)  # not ours: must stay claimed
        assert (await store.dedupe.claim(theirs)).busy


async def test_a_crashed_holders_lease_runs_out(store_factory: StoreFactory) -> None:
    event = command()
    async with store_factory(dedupe_lease_seconds="1") as crashed:
        assert (await crashed.dedupe.claim(event)).new
        claimed_at = time.monotonic()
        # ...and never completes nor releases it.
    async with store_factory(dedupe_lease_seconds="1") as survivor:
        assert (await survivor.dedupe.claim(event)).busy  # still within the lease
        await anyio.sleep(claimed_at + 1.1 - time.monotonic())
        assert (await survivor.dedupe.claim(event)).new  # the redelivery is processed
        ttl = await survivor.client.ttl(survivor.dedupe.key(event))
        assert 0 < ttl <= 1


async def test_complete_keeps_the_marker_for_the_dedupe_ttl(store_factory: StoreFactory) -> None:
    async with store_factory(dedupe_ttl_seconds="120") as store:
        event = command()
        await store.dedupe.claim(event)
        await store.dedupe.complete(event, [])
        assert 60 < await store.client.ttl(store.dedupe.key(event)) <= 120


async def test_the_marker_lives_in_the_events_scope(store: RedisStore) -> None:
    dedupe = store.dedupe
    scoped = dedupe.key(command(subject="line-1/cell-2"))
    assert scoped.startswith(store.keys.scoped("line-1/cell-2", "dedupe") + ":")
    for subject in (None, "not a {scope}"):
        key = dedupe.key(command().replace(subject=subject))
        assert key.startswith(store.keys.global_key("dedupe") + ":")


async def test_replies_that_cannot_be_kept_still_mark_the_event_done(store: RedisStore) -> None:
    event = command()
    await store.dedupe.claim(event)
    await store.dedupe.complete(event, [event.reply(source="urn:gw", data=object())])
    claim = await store.dedupe.claim(event)
    assert claim.duplicate  # processed once is enough, even if the replay is lost
    assert list(claim.replies) == []
