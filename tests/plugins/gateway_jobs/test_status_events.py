"""Status events leave in the order of the changes without holding the changes up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway.testing import wait_until
from gateway_jobs.events import StatusEvents

pytestmark = pytest.mark.anyio


def event(number: int) -> CloudEvent:
    return CloudEvent(type="test.status", source="urn:test", id=f"e{number}", data={})


class Broker:
    """A sink that takes each event at once and acknowledges it when told to."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.acknowledged: list[str] = []
        self.acknowledge = anyio.Event()
        self.refuse = False

    async def publish(self, scope: str, event: CloudEvent) -> None:
        if self.refuse:
            raise ConnectionError("broker gone")
        self.sent.append(event.id)
        await self.acknowledge.wait()
        self.acknowledged.append(event.id)


@asynccontextmanager
async def served(events: StatusEvents) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(events.serve)
        await wait_until(lambda: events.serving)
        yield
        tasks.cancel_scope.cancel()


async def test_an_announcement_does_not_wait_for_the_acknowledgement_and_keeps_the_order() -> None:
    broker = Broker()
    events = StatusEvents(broker)
    async with served(events):
        with anyio.fail_after(5):  # no acknowledgement yet: announcing must not wait for it
            for number in range(50):
                await events.announce("cell1", event(number))
        await wait_until(lambda: len(broker.sent) == 50)
        assert broker.sent == [f"e{number}" for number in range(50)]
        assert broker.acknowledged == []
        broker.acknowledge.set()
        await wait_until(lambda: len(broker.acknowledged) == 50)


async def test_unserved_an_announcement_is_sent_in_the_caller() -> None:
    broker = Broker()
    broker.acknowledge.set()
    events = StatusEvents(broker)
    await events.announce("cell1", event(1))
    assert broker.acknowledged == ["e1"]


async def test_an_event_the_broker_refuses_is_logged_and_the_next_goes_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = Broker()
    broker.acknowledge.set()
    events = StatusEvents(broker)
    async with served(events):
        broker.refuse = True
        await events.announce("cell1", event(1))
        await wait_until(lambda: "status event e1 of scope cell1 not sent" in caplog.text)
        broker.refuse = False
        await events.announce("cell1", event(2))
        await wait_until(lambda: broker.acknowledged == ["e2"])
    assert any(record.levelno == logging.WARNING for record in caplog.records)


async def test_a_broker_far_behind_makes_the_announcer_wait() -> None:
    broker = Broker()
    events = StatusEvents(broker, pending_limit=3)
    async with served(events):
        for number in range(3):
            await events.announce("cell1", event(number))
        fourth_announced = anyio.Event()

        async def announce_fourth() -> None:
            await events.announce("cell1", event(3))
            fourth_announced.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(announce_fourth)
            await wait_until(lambda: len(broker.sent) == 3)
            assert not fourth_announced.is_set()  # three unacknowledged: it waits
            broker.acknowledge.set()
            await fourth_announced.wait()
        await wait_until(lambda: broker.acknowledged == ["e0", "e1", "e2", "e3"])
