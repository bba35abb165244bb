"""The retained topics of the MES interface and the CloudEvents published on them.

Every message is a CloudEvent in binary mode, like everything else the gateway sends: the
payload is the JSON document, the attributes travel as MQTT user properties, and the retained
lifetime as the Message Expiry Interval. A delete is the same event without data: a zero-byte
retained message, which makes the broker drop the topic's retained message.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.cloudevents import JSON, CloudEvent, utc_now
from gateway.topics import JobTopicKind, MesTopics

STATE_INDEX_TYPE = "io.github.station-gateway.publisher.state-index.v1"
STATE_INDEX_PAGE_TYPE = "io.github.station-gateway.publisher.state-index-page.v1"
JOB_ORDER_TYPE = "io.github.station-gateway.publisher.job-order.v1"
JOB_RESPONSE_TYPE = "io.github.station-gateway.publisher.job-response.v1"
EVENT_TYPES = {"order": JOB_ORDER_TYPE, "result": JOB_RESPONSE_TYPE}


@dataclass(frozen=True)
class RetainedTopics:
    prefix: str
    source: str
    ttl_seconds: int  # 0: no expiry

    def state_index(self, scope: str) -> str:
        return MesTopics(self.prefix).state_index(scope)

    def page(self, scope: str, page: int) -> str:
        """A page of the state index (the jobs it lists; opt-in)."""
        return MesTopics(self.prefix).index_page(scope, page)

    def job(self, kind: JobTopicKind, scope: str, job_order_id: str) -> str:
        return MesTopics(self.prefix).job(kind, scope, job_order_id)

    def event(self, event_type: str, scope: str, payload: bytes | None) -> CloudEvent:
        """The retained message: JSON ``payload``, or ``None`` for the zero-byte delete."""
        if payload is None:
            return CloudEvent(type=event_type, source=self.source, subject=scope, time=utc_now())
        return CloudEvent(
            type=event_type,
            source=self.source,
            subject=scope,
            time=utc_now(),
            datacontenttype=JSON,
            data=payload,  # bytes: the JSON goes out as it is
            expiryinterval=self.ttl_seconds or None,
        )
