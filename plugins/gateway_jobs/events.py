"""What the MES hears without asking: status events on every transition, and the metadata.

- ``ISA95JobOrderStatusEventType`` on ``{prefix}/{scope}/events`` at QoS 1 after every stored
  transition (Update included, ResultUpdate not: it changes no state). Payload
  ``{JobOrder, JobState, JobResponse?}``; the Job Response is included once it is final (Ended,
  Aborted), so the event that announces the end also carries the results.
- A retained metadata message on ``{prefix}/metadata``, published when the gateway starts: the
  methods, CloudEvent types and configuration kinds this gateway supports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskStatus

from gateway.cloudevents import JSON, CloudEvent, utc_now
from gateway.topics import MesTopics
from gateway.transport import MQTT_BINDING, Binding
from gateway_jobs.coalesce import ServedTasks
from gateway_jobs.config import CONFIG_KINDS, config_type
from gateway_jobs.model import JobOrderStatusEvent, to_json
from gateway_jobs.repository import Change
from gateway_jobs.roles import JOB_CHANGING_ROLES, MES_ROLES
from gateway_jobs.states import MES_METHODS, state_list

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

STATUS_EVENT_TYPE = "org.opcfoundation.ISA95-JOBCONTROL_V2.ISA95JobOrderStatusEventType.v2"
METADATA_EVENT_TYPE = "io.github.station-gateway.jobs.metadata.v1"
QUERY_METHODS = ("RequestJobResponseByJobOrderID", "RequestJobResponseByJobOrderState")


def method_type(method: str) -> str:
    """The CloudEvent type of a job method (call and reply alike)."""
    if method in QUERY_METHODS:
        return f"org.opcfoundation.Machinery.Jobs.{method}.v1"
    return f"org.opcfoundation.ISA95-JOBCONTROL_V2.{method}.v2"


@dataclass(frozen=True)
class Cause:
    """The MES command behind a change, echoed on its status event (``None``: the recipe)."""

    correlationid: str | None
    causationid: str


def status_event(source: str, scope: str, change: Change, cause: Cause | None) -> CloudEvent:
    job = change.after
    payload = JobOrderStatusEvent(
        job_order=job.job_order,
        job_state=state_list(job.state),
        job_response=job.response if job.state.final else None,
    )
    return CloudEvent(
        type=STATUS_EVENT_TYPE,
        source=source,
        subject=scope,
        time=utc_now(),
        datacontenttype=JSON,
        data=to_json(payload),
        correlationid=cause.correlationid if cause else None,
        causationid=cause.causationid if cause else None,
    )


class EventSink(Protocol):
    """Where status events go (the MQTT binding; tests may collect them)."""

    async def publish(self, scope: str, event: CloudEvent) -> None: ...


class StatusEvents:
    """Sends each transition's status event without holding up the transition.

    While served (``serve``, by ``StatusEventService``), every event is published by a task of
    its own: the MES call or recipe step that made the change goes on at once instead of
    waiting for the broker's acknowledgement, which under load is a turn of a busy event loop.
    The tasks start in the order the events were given, and each sends its event before it
    first waits, so the events leave in the order of the changes. When not served (at start,
    at shutdown, in tests), an event is sent in the caller. Events are not stored: one the
    broker does not take is logged, and the MES reads the state from the publisher's retained
    topics or by asking (as before, when the caller logged it).
    """

    def __init__(self, sink: EventSink, *, pending_limit: int = 1000) -> None:
        self.sink = sink
        self._served = ServedTasks()
        self._pending = anyio.Semaphore(pending_limit)  # sent, unacknowledged: then wait

    @property
    def serving(self) -> bool:
        return self._served.group is not None

    async def announce(self, scope: str, event: CloudEvent) -> None:
        tasks = self._served.group
        if tasks is None:
            await self._send(scope, event)
            return
        try:
            self._pending.acquire_nowait()  # (``acquire`` would yield first, and reorder)
        except anyio.WouldBlock:
            await self._pending.acquire()  # the broker is far behind: wait for it
            tasks = self._served.group  # still served after the wait?
            if tasks is None:
                self._pending.release()
                await self._send(scope, event)
                return
        tasks.start_soon(self._send_pending, scope, event)

    async def serve(self) -> None:
        """Send the events given until cancelled (which abandons those not acknowledged)."""
        await self._served.serve()

    async def _send_pending(self, scope: str, event: CloudEvent) -> None:
        try:
            await self._send(scope, event)
        finally:
            self._pending.release()

    async def _send(self, scope: str, event: CloudEvent) -> None:
        try:
            await self.sink.publish(scope, event)
        except Exception as error:  # stored already; the MES can query or read the publisher
            log.warning("status event %s of scope %s not sent: %s", event.id, scope, error)


@dataclass
class StatusEventService:
    """Serves ``StatusEvents`` wherever jobs change (MES calls, recipe steps)."""

    events: StatusEvents
    name: str = "jobs-status-events"
    roles: frozenset[str] = JOB_CHANGING_ROLES

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.events.serve)
            task_status.started()
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()


@dataclass(frozen=True)
class BindingEvents:
    """Status events published through a binding on ``{prefix}/{scope}/events``, QoS 1."""

    binding: Binding
    topic_prefix: str

    async def publish(self, scope: str, event: CloudEvent) -> None:
        await self.binding.publish(MesTopics(self.topic_prefix).events(scope), event, qos=1)


def metadata(topic_prefix: str) -> dict[str, Any]:
    """The capabilities payload (``meta`` of the MicroDCS schema, plus the type ids)."""
    methods = [*MES_METHODS, *QUERY_METHODS]
    attributes: list[tuple[str, Any]] = [
        ("supported_commands", methods),
        ("event_types", ["ISA95JobOrderStatusEventType"]),
        ("command_types", [method_type(method) for method in methods]),
        ("status_event_type", STATUS_EVENT_TYPE),
        ("configuration_types", [config_type(kind) for kind in CONFIG_KINDS]),
        ("configuration_methods", ["PUT", "DELETE"]),
        (
            "topics",
            {
                "commands": MesTopics(topic_prefix).commands("{scope}"),
                "events": MesTopics(topic_prefix).events("{scope}"),
                "metadata": MesTopics(topic_prefix).metadata(),
            },
        ),
    ]
    return {
        "modelUri": "http://opcfoundation.org/UA/Machinery/Jobs/",
        "modelVersion": "1.0.1",
        "modelDate": "2024-05-01T00:00:00",
        "additionalAttributes": [list(pair) for pair in attributes],
    }


@dataclass
class MetadataService:
    """Publishes the retained metadata once the binding is up, then idles until shutdown."""

    topic_prefix: str
    binding_name: str = MQTT_BINDING
    name: str = "jobs-metadata"
    roles: frozenset[str] = MES_ROLES

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        event = CloudEvent(
            type=METADATA_EVENT_TYPE,
            source=gateway.source,
            time=utc_now(),
            datacontenttype=JSON,
            data=metadata(self.topic_prefix),
        )
        topic = MesTopics(self.topic_prefix).metadata()
        try:
            await gateway.binding(self.binding_name).publish(topic, event, retain=True, qos=1)
        except Exception as error:  # the MES misses capabilities, not commands: keep running
            log.warning("metadata not published on %s: %s", topic, error)
        task_status.started()
        await gateway.stopping.wait()
