"""The MES's job methods for any northbound protocol, and the status events it follows.

Job management (the jobs plugin) implements ``JobMethods`` (``gateway.job_methods``). Its own
MQTT processor goes through it, and so does any other protocol that serves the MES, such as
the OPC UA server: a job stored one way is seen and controlled the other way, because both
make the same calls on the same store.

Arguments and results are the OPC UA arguments in their JSON form, PascalCase names as in the
information model (``{"JobOrder": {...}, "Comment": [...]}``, ``{"JobOrderID": "J1"}``;
results ``{"ReturnStatus": 1}``, plus ``JobResponse`` / ``JobResponses`` for the two queries),
so the host needs none of the ISA-95 types and a protocol converts only its own encoding.

Status events come from the store's change streams, so a server on one instance hears about
every change, whichever instance made it (a Store through MQTT on another instance, a recipe
completing on a third).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from gateway.changes import Trigger
from gateway.jobstates import JobState


class JobMethod(StrEnum):
    """The methods of OPC 40001-3's JobOrderControl and JobOrderResults."""

    STORE = "Store"
    STORE_AND_START = "StoreAndStart"
    START = "Start"
    REVOKE_START = "RevokeStart"
    UPDATE = "Update"
    STOP = "Stop"
    PAUSE = "Pause"
    RESUME = "Resume"
    ABORT = "Abort"
    CANCEL = "Cancel"
    CLEAR = "Clear"
    REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID = "RequestJobResponseByJobOrderID"
    REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE = "RequestJobResponseByJobOrderState"

    @property
    def is_query(self) -> bool:
        """JobOrderResults' methods: they read, and change nothing."""
        return self in _QUERIES


_QUERIES = frozenset(
    {
        JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID,
        JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE,
    }
)

RETURN_STATUS = "ReturnStatus"
NO_ERROR = 1  # ISA95-JOBCONTROL's ReturnStatus bit 0: success (the other bits say what failed)


@dataclass(frozen=True)
class MethodResult:
    """The output arguments of a call, and why it failed when it did."""

    output: Mapping[str, Any]  # {"ReturnStatus": 1, ...} in OPC UA JSON
    message: str | None = None  # which check failed (``duplicate: ...``), when not NO_ERROR

    @property
    def return_status(self) -> int:
        status = self.output[RETURN_STATUS]
        assert isinstance(status, int)
        return status

    @property
    def ok(self) -> bool:
        return self.return_status == NO_ERROR


@dataclass(frozen=True)
class JobStatus:
    """One ``ISA95JobOrderStatusEventType``: a job changed state (the change is stored).

    ``job_order``, ``job_state`` and ``job_response`` are in OPC UA JSON; the response is the
    job's current one (final once the job is Ended or Aborted). For a job that left the station
    (``state`` ``EndState``: Clear, Cancel) they are the last ones known.
    """

    scope: str
    job_order_id: str
    method: Trigger  # the MES method or recipe report that caused it (``Store``, ``Complete``...)
    state: JobState  # e.g. ``Ended.Completed``
    job_order: Mapping[str, Any]
    job_state: Sequence[Mapping[str, Any]]
    job_response: Mapping[str, Any]


class StatusFeed(Protocol):
    """The status events of some scopes from the moment the feed was entered, in order per scope.

    Read the current state (``JobMethods.job_orders``) after entering: nothing that changes
    after that read is missed, and a change seen in both is harmless to apply twice.
    """

    def __aiter__(self) -> AsyncIterator[JobStatus]: ...


class JobMethods(Protocol):
    """Job management as a northbound protocol calls it."""

    async def call(
        self,
        scope: str,
        method: JobMethod,
        arguments: Mapping[str, Any],
        *,
        correlationid: str | None = None,
        causationid: str | None = None,
    ) -> MethodResult:
        """Call ``method`` on ``scope``'s jobs.

        Raises ``gateway.errors.ValidationError`` naming the argument when ``arguments`` do not
        fit the method (and nothing changes); every other outcome is a ``ReturnStatus``.
        ``correlationid`` / ``causationid`` are echoed on the status events the call causes.
        """
        ...

    async def job_orders(self, scope: str) -> Sequence[Mapping[str, Any]]:
        """The scope's jobs as ``ISA95JobOrderAndStateDataType`` JSON, highest priority first."""
        ...

    async def receiver_configuration(self, scope: str) -> Mapping[str, Any]:
        """What the scope accepts in a job order, as OPC 40001-3's JobOrderControl shows it:
        ``EquipmentID``, ``MaterialClassID``, ``MaterialDefinitionID``, ``PersonnelID`` and
        ``PhysicalAssetID`` (the IDs configured; empty: none is), ``WorkMaster`` (each Work
        Master as ``ISA95WorkMasterDataType`` JSON: ``ID``, ``Description``, ``Parameters``)
        and ``MaxDownloadableJobOrders`` (the jobs it may hold; 65535: no limit)."""
        ...

    def status_feed(
        self, scopes: Sequence[str], *, documents: bool = True, pace_seconds: float = 0.0
    ) -> AbstractAsyncContextManager[StatusFeed]:
        """Follow the status events of ``scopes`` (every instance's changes) while entered.

        ``documents=False``: for a follower that needs the states alone (which jobs ended),
        the events carry only the documents the change itself carries (``job_order`` and
        ``job_response`` else name the job alone), and the feed reads nothing per event.
        ``pace_seconds``: for a follower that needs no promptness, the change streams are
        read at most that often while changes keep coming (``gateway.changes.ReadPace``): the
        first change after a quiet spell comes at once, the others up to that much later,
        together; 0 (the default): a read per wake."""
        ...
