"""The queue of each scope, retained on the MES topics: ``{prefix}/{scope}/queue``.

A CloudEvent of type ``QUEUE_EVENT_TYPE`` (JSON, retained, QoS 1; ``schemas/jobs/
events.schema.json#/$defs/Queue``), published by the instance that dispatched, whenever what it
shows changed::

    {"Scope": "cell1", "Online": false, "Reason": "maintenance", "MaxRunningJobOrders": 1,
     "Running": [{"JobOrderID": "J7", "Equipment": ["positioner", "tightener"]}],
     "Waiting": [{"JobOrderID": "J9", "Position": 1, "Priority": 5,
                  "StartTime": "2026-11-26T10:00:00Z", "Equipment": ["positioner"]}],
     "UpdatedAt": "2026-11-26T09:59:58.125Z"}

``Running`` lists the jobs let start and not ended yet (running, paused or held, or just handed
to their interpreter). Every instance publishes what it reads after a change; two instances may
publish in either order, so each also publishes in its periodic dispatch pass whenever what it
read differs from what it last sent, and every ``REFRESH_SECONDS`` in any case (a broker that
lost its retained messages gets it back): the topic shows the current queue within one pass.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.cloudevents import JSON, CloudEvent, format_time, utc_now
from gateway.transport import Binding
from gateway_jobs.queue import QueueView, rfc3339

log = logging.getLogger(__name__)

QUEUE_EVENT_TYPE = "io.github.station-gateway.jobs.queue.v1"
REFRESH_SECONDS = 60.0


def queue_topic(topic_prefix: str, scope: str) -> str:
    return f"{topic_prefix}/{scope}/queue"


def queue_document(scope: str, view: QueueView) -> dict[str, Any]:
    """The retained document of ``view`` (without ``UpdatedAt``)."""
    return {
        "Scope": scope,
        "Online": view.online,
        "Reason": view.reason,
        "MaxRunningJobOrders": view.capacity,
        "Running": [
            {"JobOrderID": job, "Equipment": list(equipment)}
            for job, equipment in sorted(view.admitted.items())
        ],
        "Waiting": [
            {
                "JobOrderID": entry.job_order_id,
                "Position": entry.position,
                "Priority": entry.priority,
                "StartTime": None if entry.start_time is None else rfc3339(entry.start_time),
                "Equipment": list(entry.equipment),
            }
            for entry in view.waiting
        ],
    }


class QueueFeed:
    """Publishes a scope's queue when it changed (see the module docstring)."""

    def __init__(
        self,
        binding: Binding,
        topic_prefix: str,
        source: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binding = binding
        self.topic_prefix = topic_prefix
        self.source = source
        self.clock = clock
        self._sent: dict[str, tuple[str, float]] = {}  # scope -> (document, when)

    async def publish(self, scope: str, view: QueueView) -> None:
        document = queue_document(scope, view)
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
