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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from anyio.abc import TaskStatus

from gateway.cloudevents import JSON, CloudEvent, utc_now
from gateway.transport import MQTT_BINDING, Binding
from gateway_jobs.config import CONFIG_KINDS, config_type
from gateway_jobs.model import JobOrderStatusEvent, to_json
from gateway_jobs.repository import Change
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


@dataclass(frozen=True)
class BindingEvents:
    """Status events published through a binding on ``{prefix}/{scope}/events``, QoS 1."""

    binding: Binding
    topic_prefix: str

    async def publish(self, scope: str, event: CloudEvent) -> None:
        await self.binding.publish(f"{self.topic_prefix}/{scope}/events", event, qos=1)


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
                "commands": f"{topic_prefix}/{{scope}}/commands",
                "events": f"{topic_prefix}/{{scope}}/events",
                "metadata": f"{topic_prefix}/metadata",
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
    roles: frozenset[str] = field(default_factory=lambda: frozenset({"gateway"}))

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        event = CloudEvent(
            type=METADATA_EVENT_TYPE,
            source=gateway.source,
            time=utc_now(),
            datacontenttype=JSON,
            data=metadata(self.topic_prefix),
        )
        topic = f"{self.topic_prefix}/metadata"
        try:
            await gateway.binding(self.binding_name).publish(topic, event, retain=True, qos=1)
        except Exception as error:  # the MES misses capabilities, not commands: keep running
            log.warning("metadata not published on %s: %s", topic, error)
        task_status.started()
        await gateway.stopping.wait()
