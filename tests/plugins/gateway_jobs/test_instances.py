"""Two gateway instances on one scope: each command handled once, conflicting changes serialized."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway.store import Store
from gateway.testing import running
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    Station,
    change_records,
    job_order,
    return_status,
    work_master,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def change_types(store: Store, scope: str = "cell1") -> Counter[tuple[str, str]]:
    records = await change_records(store, scope)
    return Counter((record.trigger.value, record.job_order_id) for record in records)


async def concurrently(mes: JobsMes, events: list[CloudEvent]) -> list[CloudEvent]:
    replies: list[CloudEvent] = []

    async def send(event: CloudEvent) -> None:
        replies.append(await mes.client.request(mes.commands_topic, event, timeout=10))

    async with anyio.create_task_group() as tasks:
        for event in events:
            tasks.start_soon(send, event)
    return replies


def store_event(mes: JobsMes, job_order_id: str) -> CloudEvent:
    return mes.event(
        "org.opcfoundation.ISA95-JOBCONTROL_V2.Store.v2", {"JobOrder": job_order(job_order_id)}
    )


async def test_fifty_concurrent_stores_on_two_instances(station: Station, store: Store) -> None:
    async with running(station.gateway("a")), running(station.gateway("b")), station.mes() as mes:
        assert return_status(await mes.configure("workmaster", work_master("wm", {}))) == 1
        events = [store_event(mes, f"job-{n}") for n in range(50)]
        replies = await concurrently(mes, events)
    assert len(replies) == 50
    assert {reply.causationid for reply in replies} == {event.id for event in events}
    assert all(return_status(reply) == ReturnStatus.NO_ERROR for reply in replies)
    assert {reply.source for reply in replies} == {
        f"urn:station-gateway:{station.name}-a",
        f"urn:station-gateway:{station.name}-b",
    }
    assert await change_types(store) == Counter({("Store", f"job-{n}"): 1 for n in range(50)})
    assert await store.client.zcard(store.keys.scoped("cell1", "jobs", "by-priority")) == 50


async def test_conflicting_transitions_on_one_job_have_one_winner(
    station: Station, store: Store
) -> None:
    async with running(station.gateway("a")), running(station.gateway("b")), station.mes() as mes:
        assert return_status(await mes.configure("workmaster", work_master("wm"))) == 1
        assert return_status(await mes.store(job_order("j1"), "StoreAndStart")) == 1  # runs
        events = [
            mes.event(f"org.opcfoundation.ISA95-JOBCONTROL_V2.{method}.v2", {"JobOrderID": "j1"})
            for method in ("Stop", "Abort") * 10
        ]
        replies = await concurrently(mes, events)
    statuses = Counter(return_status(reply) for reply in replies)
    assert statuses == Counter(
        {ReturnStatus.NO_ERROR: 1, ReturnStatus.INVALID_JOB_ORDER_STATUS: 19}
    )
    changes = await change_types(store)
    assert changes[("Stop", "j1")] + changes[("Abort", "j1")] == 1


async def test_the_station_limit_holds_under_concurrent_stores(
    station: Station, store: Store
) -> None:
    gateways = station.gateway("a", max_job_orders="5"), station.gateway("b", max_job_orders="5")
    async with running(gateways[0]), running(gateways[1]), station.mes() as mes:
        assert return_status(await mes.configure("workmaster", work_master("wm", {}))) == 1
        replies = await concurrently(mes, [store_event(mes, f"job-{n}") for n in range(20)])
    statuses = Counter(return_status(reply) for reply in replies)
    assert statuses == Counter(
        {ReturnStatus.NO_ERROR: 5, ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER: 15}
    )
    assert await store.client.zcard(store.keys.scoped("cell1", "jobs", "by-priority")) == 5


async def test_a_redelivered_command_is_answered_again_not_applied_again(
    station: Station, store: Store
) -> None:
    async with running(station.gateway("a")), running(station.gateway("b")), station.mes() as mes:
        assert return_status(await mes.configure("workmaster", work_master("wm", {}))) == 1
        assert return_status(await mes.store(job_order("j1"))) == 1
        start = mes.event("org.opcfoundation.ISA95-JOBCONTROL_V2.Start.v2", {"JobOrderID": "j1"})
        first = await mes.client.request(mes.commands_topic, start)
        again = await mes.client.request(mes.commands_topic, start)  # same source and id
    assert return_status(first) == return_status(again) == ReturnStatus.NO_ERROR
    assert (await change_types(store))[("Start", "j1")] == 1
    assert station.plugin.interpreters[0].started + station.plugin.interpreters[1].started == ["j1"]
