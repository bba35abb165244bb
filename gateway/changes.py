"""The change record: one entry of a scope's change stream (``KeySchema.changes``).

Job management appends one record per stored state change, in the transaction that makes it,
so whoever reads a scope's stream sees every change any instance made, in order. It is the one
writer (``ChangeRecord.fields``); the MES publisher, the status events of ``gateway.jobmethods``
and the web UI read the records back with ``ChangeRecord.parse``, and a plugin that follows the
stream does the same. Fields on the stream, all text:

====================  ==========================================================================
``change_type``       the ``Trigger``: the MES method or recipe report that made the change
``job_order_id``      the job (never holds an MQTT wildcard, ``/`` or NUL: it names topics)
``scope``             the scope
``state``             the job's state after, a ``JobState`` path (``Ended.Completed``)
``state_number``      the state's number (OPC 40001-3), for readers that show it
``previous``          the job's state before (``InitialState`` for a new job)
``priority``          the job order's priority, so an index can be ordered without the job
``has_result``        ``true`` when the Job Response is final (Ended / Aborted, results in)
``job_order``         optional: the ISA95JobOrderDataType JSON, when the order is new or changed
``job_response``      optional: the ISA95JobResponseDataType JSON, once the job is final
``ts``                when it was appended (RFC 3339), added by the store
====================  ==========================================================================

The documents make a record self-contained: publishing it costs no read, and a replayed record
publishes the same bytes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

import anyio

from gateway.jobstates import JobState

_TOPIC_LEVEL_FORBIDDEN = frozenset("/+#\x00")
_Enum = TypeVar("_Enum", bound=StrEnum)


class Trigger(StrEnum):
    """What changed a job's state: an MES method, or a report of the job's recipe."""

    STORE = "Store"
    STORE_AND_START = "StoreAndStart"
    START = "Start"
    REVOKE_START = "RevokeStart"
    UPDATE = "Update"
    PAUSE = "Pause"
    RESUME = "Resume"
    STOP = "Stop"
    ABORT = "Abort"
    CANCEL = "Cancel"
    CLEAR = "Clear"
    RUN = "Run"
    COMPLETE = "Complete"
    FAIL = "Fail"
    HOLD = "Hold"
    RESULT_UPDATE = "ResultUpdate"

    @property
    def sets_order(self) -> bool:
        """It creates or changes the job order (and so its retained order topic)."""
        return self in _ORDER_TRIGGERS

    @property
    def changes_state(self) -> bool:
        """Everything but ``ResultUpdate``, which records results only (it gives no event)."""
        return self is not Trigger.RESULT_UPDATE


_ORDER_TRIGGERS = frozenset({Trigger.STORE, Trigger.STORE_AND_START, Trigger.UPDATE})


class ChangeRecordError(ValueError):
    """A stream entry that is no change record (it names what is missing or wrong)."""


@dataclass(frozen=True)
class ChangeRecord:
    trigger: Trigger
    scope: str
    job_order_id: str
    state: JobState
    previous: JobState
    priority: int
    has_result: bool  # Ended or Aborted, and no results awaited: the Job Response is final
    job_order: str | None = None  # JSON text, when the record carries it
    job_response: str | None = None
    entry_id: str = ""  # the stream entry's id, once read back
    written_at: str | None = None  # ``ts``, once read back

    @property
    def removes_job(self) -> bool:
        return self.state is JobState.END  # Clear or Cancel: the job left the station

    def fields(self) -> dict[str, str]:
        """The stream entry's fields (what the writer appends)."""
        fields = {
            "change_type": self.trigger.value,
            "job_order_id": self.job_order_id,
            "scope": self.scope,
            "state": self.state.value,
            "state_number": str(self.state.number),
            "previous": self.previous.value,
            "priority": str(self.priority),
            "has_result": "true" if self.has_result else "false",
        }
        if self.job_order is not None:
            fields["job_order"] = self.job_order
        if self.job_response is not None:
            fields["job_response"] = self.job_response
        return fields

    @classmethod
    def parse(cls, entry_id: str, fields: Mapping[str, str]) -> ChangeRecord:
        """The record of a stream entry; ``ChangeRecordError`` names what is missing or wrong."""
        job_order_id = _required(fields, "job_order_id")
        if _TOPIC_LEVEL_FORBIDDEN & set(job_order_id):
            raise ChangeRecordError(f"job_order_id {job_order_id!r} cannot be an MQTT topic level")
        try:
            priority = int(fields.get("priority") or 0)
        except ValueError:
            raise ChangeRecordError(f"priority {fields.get('priority')!r} is no integer") from None
        return cls(
            trigger=_enum(Trigger, fields, "change_type"),
            scope=_required(fields, "scope"),
            job_order_id=job_order_id,
            state=_enum(JobState, fields, "state"),
            previous=_enum(JobState, fields, "previous"),
            priority=priority,
            has_result=fields.get("has_result") == "true",
            job_order=fields.get("job_order") or None,
            job_response=fields.get("job_response") or None,
            entry_id=entry_id,
            written_at=fields.get("ts") or None,
        )


def _enum(kind: type[_Enum], fields: Mapping[str, str], name: str) -> _Enum:
    text = _required(fields, name)
    try:
        return kind(text)
    except ValueError:
        raise ChangeRecordError(f"{name} {text!r} is no {kind.__name__}") from None


def _required(fields: Mapping[str, str], name: str) -> str:
    value = fields.get(name)
    if not value:
        raise ChangeRecordError(f"field {name!r} is missing")
    return value


class ReadPace:
    """When a reader of change streams reads next: at once at rest, at most every ``seconds``
    while records keep coming.

    A reader that wakes per record pays a read (and whatever it does per batch: the publisher's
    commit script) for each change. Paced, the read after one that returned records waits
    until ``seconds`` after it: the records written meanwhile come with one read and make one
    batch. The first record after a quiet spell is read at once (the blocking read is already
    waiting), so pacing adds no latency at rest; a record that follows another within
    ``seconds`` is read at most ``seconds`` later than it would have been. A read that returned
    a full ``count`` (a backlog) is followed at once. ``seconds`` 0: never waits.

    ``clock`` and ``sleep`` are injectable (tests).
    """

    def __init__(
        self,
        seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.seconds = seconds
        self.clock = clock
        self.sleep = sleep
        self._next = -math.inf  # no read before this time

    async def wait(self) -> None:
        """Before a read: wait until the pace allows it."""
        delay = self._next - self.clock()
        if delay > 0:
            await self.sleep(delay)

    def read(self, records: int, count: int | None = None) -> None:
        """After a read that returned ``records`` (of at most ``count``, when it was bounded)."""
        full = count is not None and records >= count
        if records and not full and self.seconds > 0:
            self._next = self.clock() + self.seconds
        else:
            self._next = -math.inf
