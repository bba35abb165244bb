"""The queue of each scope, retained on the MES topics: ``{prefix}/{scope}/queue``.

A CloudEvent of type ``QUEUE_EVENT_TYPE`` (JSON, retained, QoS 1; ``schemas/jobs/
events.schema.json#/$defs/Queue``), published by an instance that dispatched, whenever what it
shows changed::

    {"Scope": "cell1", "Online": false, "Reason": "maintenance", "MaxRunningJobOrders": 1,
     "RunningCount": 1, "WaitingCount": 1,
     "Running": [{"JobOrderID": "J7", "Equipment": ["positioner", "tightener"]}],
     "Waiting": [{"JobOrderID": "J9", "Position": 1, "Priority": 5,
                  "StartTime": "2026-11-26T10:00:00Z", "Equipment": ["positioner"],
                  "BlockedBy": []}],
     "Blocked": [{"EquipmentID": "clamp", "JobOrderID": "J5", "Reason": "...",
                  "Since": "2026-11-26T09:40:00Z"}],
     "UpdatedAt": "2026-11-26T09:59:58.125Z"}

``Blocked`` lists the equipment an unsafe failure left blocked until acknowledged (``queue``), and
each waiting job's ``BlockedBy`` the blocked equipment it needs. ``Running`` lists the jobs let
start and not ended yet (running, paused or held, or just handed to their interpreter), by
JobOrderID; ``Waiting`` the queued ones in the order they will start. Each lists at most ``[jobs]
queue_feed_jobs`` jobs (the first ones), and ``RunningCount`` / ``WaitingCount`` say how many there
are: the bytes of one update stay bounded however many jobs a scope holds (the rest of the queue:
RequestJobResponseByJobOrderState, AllowedToStart, gives every queued job's QueuePosition).

Publishing follows the dispatch passes without delaying them (``coalesce``): each pass hands
over the queue as it left it (the dispatch script returns it: no read of its own), at most one
publish per scope is in flight, and they start at least ``[jobs] queue_feed_ms`` apart, showing
the latest queue handed over, so a burst of changes costs one publish per interval, not one
per change. Every
instance publishes what it reads; two instances may publish in either order, so each also
publishes after its periodic dispatch pass whenever what it read differs from what it last
sent, and every ``REFRESH_SECONDS`` in any case (a broker that lost its retained messages gets
it back): the topic shows the current queue within one pass.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from gateway.cloudevents import JSON, CloudEvent, format_time, utc_now
from gateway.topics import MesTopics
from gateway.transport import Binding
from gateway_jobs.coalesce import Coalescer
from gateway_jobs.queue import QueueView, rfc3339
from gateway_jobs.roles import JOB_CHANGING_ROLES

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

QUEUE_EVENT_TYPE = "io.github.station-gateway.jobs.queue.v1"
REFRESH_SECONDS = 60.0


def queue_topic(topic_prefix: str, scope: str) -> str:
    return MesTopics(topic_prefix).queue(scope)


def queue_document(scope: str, view: QueueView, limit: int) -> dict[str, Any]:
    """The retained document of ``view`` (without ``UpdatedAt``), at most ``limit`` jobs in
    each list."""
    running = sorted(view.admitted.items())
    return {
        "Scope": scope,
        "Online": view.online,
        "Reason": view.reason,
        "MaxRunningJobOrders": view.capacity,
        "RunningCount": len(running),
        "WaitingCount": len(view.waiting),
        "Running": [
            {"JobOrderID": job, "Equipment": list(equipment)} for job, equipment in running[:limit]
        ],
        "Waiting": [
            {
                "JobOrderID": entry.job_order_id,
                "Position": entry.position,
                "Priority": entry.priority,
                "StartTime": None if entry.start_time is None else rfc3339(entry.start_time),
                "Equipment": list(entry.equipment),
                # What it waits for besides its turn: equipment an unsafe failure blocked.
                "BlockedBy": [item for item in entry.equipment if item in view.blocked],
            }
            for entry in view.waiting[:limit]
        ],
        "Blocked": [
            {
                "EquipmentID": equipment,
                "JobOrderID": blocked.job_order_id,
                "Reason": blocked.reason,
                "Since": rfc3339(blocked.since),
            }
            for equipment, blocked in sorted(view.blocked.items())
        ],
    }


class QueueFeed:
    """Publishes a scope's queue when it changed (see the module docstring).

    ``read``: the scope's queue as stored now (``Dispatcher.queue``), for a change that comes
    without it. Also the service that runs the publishing in the background; while it does not
    run, ``changed`` publishes at once.
    """

    name = "jobs-queue-feed"
    roles = JOB_CHANGING_ROLES  # where the dispatcher runs

    def __init__(
        self,
        binding: Binding,
        topic_prefix: str,
        source: str,
        read: Callable[[str], Awaitable[QueueView]],
        *,
        interval: float = 0.2,
        limit: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binding = binding
        self.topic_prefix = topic_prefix
        self.source = source
        self.read = read
        self.limit = limit
        self.clock = clock
        self.updates = Coalescer("publishing the queue", self._update, interval=interval)
        self._sent: dict[str, tuple[str, float]] = {}  # scope -> (document, when)
        self._latest: dict[str, QueueView] = {}  # scope -> the newest view handed over

    async def changed(self, scope: str, view: QueueView | None = None) -> None:
        """The scope's queue may have changed: publish it soon (``Dispatcher.feed``), as
        ``view`` shows it (``None``: as read then)."""
        if view is None:
            self._latest.pop(scope, None)
        else:
            self._latest[scope] = view
        await self.updates.request(scope)

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        """Publish in the background until the gateway stops; what is left then is published
        by the first dispatch pass of the next start, or of another instance."""
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.updates.serve)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()

    async def _update(self, scope: str) -> None:
        view = self._latest.pop(scope, None)
        await self.publish(scope, view if view is not None else await self.read(scope))

    async def publish(self, scope: str, view: QueueView) -> None:
        document = queue_document(scope, view, self.limit)
        text = json.dumps(document, sort_keys=True)
        last = self._sent.get(scope)
        now = self.clock()
        if last is not None and last[0] == text and now - last[1] < REFRESH_SECONDS:
            return
        event = CloudEvent(
            type=QUEUE_EVENT_TYPE,
            source=self.source,
            subject=scope,
            time=utc_now(),
            datacontenttype=JSON,
            data=document | {"UpdatedAt": format_time(utc_now())},
        )
        await self.binding.publish(queue_topic(self.topic_prefix, scope), event, retain=True, qos=1)
        self._sent[scope] = (text, now)
