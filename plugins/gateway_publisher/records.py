"""Change records as the publisher reads them from a scope's change stream.

The job management plugin appends one record per state write, in the same transaction
(``change_type``, ``job_order_id``, ``scope``, ``state``, ``state_number``, ``previous``,
``priority``, ``has_result``). Two optional fields carry the documents the retained topics
publish, so that a record is self-contained and replaying it publishes the same bytes:

- ``job_order``: the ISA95JobOrderDataType JSON, on Store, StoreAndStart and Update;
- ``job_response``: the ISA95JobResponseDataType JSON, whenever ``has_result`` is true.

A record without them makes the publisher ask its ``DocumentSource`` (see ``documents``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.jobstates import JobState

ORDER_TRIGGERS = frozenset({"Store", "StoreAndStart", "Update"})
_TOPIC_LEVEL_FORBIDDEN = frozenset("/+#\x00")


class RecordError(ValueError):
    """A change record the publisher cannot use (it is logged and skipped)."""


@dataclass(frozen=True)
class ChangeRecord:
    entry_id: str
    change_type: str
    job_order_id: str
    state: JobState
    priority: int
    has_result: bool  # Ended or Aborted: the Job Response is final
    job_order: str | None = None  # JSON text, when the record carries it
    job_response: str | None = None

    @property
    def removes_job(self) -> bool:
        return self.state is JobState.END  # Clear or Cancel: the job left the station

    @property
    def sets_order(self) -> bool:
        return self.change_type in ORDER_TRIGGERS


def parse_record(entry_id: str, fields: Mapping[str, str]) -> ChangeRecord:
    """The record of a stream entry; ``RecordError`` names what is missing or wrong."""
    job_order_id = _required(fields, "job_order_id")
    if _TOPIC_LEVEL_FORBIDDEN & set(job_order_id):
        raise RecordError(f"job_order_id {job_order_id!r} cannot be an MQTT topic level")
    try:
        priority = int(fields.get("priority") or 0)
    except ValueError:
        raise RecordError(f"priority {fields.get('priority')!r} is not an integer") from None
    return ChangeRecord(
        entry_id=entry_id,
        change_type=_required(fields, "change_type"),
        job_order_id=job_order_id,
        state=_state(_required(fields, "state")),
        priority=priority,
        has_result=fields.get("has_result") == "true",
        job_order=fields.get("job_order") or None,
        job_response=fields.get("job_response") or None,
    )


def _state(text: str) -> JobState:
    try:
        return JobState(text)
    except ValueError:
        raise RecordError(f"state {text!r} is no job state") from None


def _required(fields: Mapping[str, str], name: str) -> str:
    value = fields.get(name)
    if not value:
        raise RecordError(f"field {name!r} is missing")
    return value
