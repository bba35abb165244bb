"""The line's side of the stations' MES interface: one broker connection, calls, what it knows.

``StationLink`` is this gateway's MES connection to every downstream station (one client on the
line's broker, a clean session: what happened while it was away is read again from the
stations' retained topics). It sends the job methods (StoreAndStart, Pause, Resume, Stop, Abort,
Clear) to ``<prefix>/<scope>/commands`` and waits for their ``ReturnStatus``, and keeps what it
last heard of each station's jobs (from the retained state index and the status events): the
jobs an upstream Pause or Abort must reach. It is also the plugin's observer of upstream job
state changes (``gateway_job_state_changed``), which it queues for ``follower`` to pass on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiomqtt
import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway.cloudevents import CloudEvent
from gateway.errors import GatewayError
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState
from gateway.mqttclient import CloudEventClient
from gateway.resilience import TransientError
from gateway.topics import MesTopics
from gateway_line.orders import upstream_of
from gateway_line.settings import LineSettings, Station

log = logging.getLogger(__name__)

NO_ERROR = 1  # ISA95-JOBCONTROL ReturnStatus bit 0
INVALID_STATE = 8  # the method is not allowed in the job's state (nothing changed)
QUEUED_CHANGES = 1000  # upstream state changes waiting for the connection
CONNECTION_WAIT_SECONDS = 2.0  # a call waits this long at most for the line's connection


def method_type(method: str) -> str:
    """The CloudEvent type of an OPC 40001-3 job method (the stations' MES interface)."""
    return f"org.opcfoundation.ISA95-JOBCONTROL_V2.{method}.v2"


@dataclass(frozen=True)
class Answer:
    """A station's answer to a job method."""

    status: int
    message: str  # the reply's errormessage, when it refused

    @property
    def ok(self) -> bool:
        return self.status == NO_ERROR

    @property
    def duplicate(self) -> bool:
        """StoreAndStart of a job order id the station already holds."""
        return self.message.startswith("duplicate:")


@dataclass(frozen=True)
class UpstreamChange:
    scope: str
    job: str
    previous: JobState
    current: JobState


class StationLink:
    """The connection to the stations (``None`` while it is down) and their jobs as last heard."""

    def __init__(self, settings: LineSettings, source: str) -> None:
        self.settings = settings
        self.source = source  # CloudEvent source of what the line sends
        self.stations: dict[str, Station] = {
            station.equipment: station for station in settings.line()
        }
        self.topics = MesTopics(settings.topic_prefix)
        # station equipment -> the line's jobs there -> their state ("Running", "Ended.Completed")
        self.jobs: dict[str, dict[str, str]] = {name: {} for name in self.stations}
        self._client: CloudEventClient | None = None
        self._connected: anyio.Event | None = None  # made in the event loop, when first needed
        self._changes_in: MemoryObjectSendStream[UpstreamChange]
        self.changes: MemoryObjectReceiveStream[UpstreamChange]
        self._changes_in, self.changes = anyio.create_memory_object_stream[UpstreamChange](
            QUEUED_CHANGES
        )

    # -- the connection ---------------------------------------------------------------------

    def connected(self, client: CloudEventClient | None) -> None:
        """The follower's connection came up (``client``) or went down (``None``)."""
        self._client = client
        if client is not None:
            self._connection_event().set()
        elif self._connection_event().is_set():
            self._connected = anyio.Event()

    def _connection_event(self) -> anyio.Event:
        if self._connected is None:
            self._connected = anyio.Event()
        return self._connected

    async def _client_within(self, seconds: float) -> CloudEventClient:
        with anyio.move_on_after(seconds):
            await self._connection_event().wait()
        if self._client is None:
            raise TransientError(f"the line's broker has not been reachable for {seconds:g} s")
        return self._client

    async def call(self, station: str, method: str, data: Mapping[str, Any]) -> Answer:
        """Call ``method`` on ``station``'s scope.

        ``TransientError`` when the broker is away or the station does not answer within
        ``request_timeout_seconds`` (a command then waits in the recipe runtime's outbox and is
        sent again, the same job order id: harmless, the station stores a job once);
        ``GatewayError`` when the station answers with an error instead of a ReturnStatus.
        """
        timeout = self.settings.request_timeout_seconds
        scope = self.stations[station].scope
        # Not the whole timeout: a step waiting here holds a worker of the recipe runtime.
        client = await self._client_within(min(timeout, CONNECTION_WAIT_SECONDS))
        event = CloudEvent(type=method_type(method), source=self.source, subject=scope, data=data)
        try:
            reply = await client.request(self.topics.commands(scope), event, timeout=timeout)
        except (aiomqtt.MqttError, anyio.BrokenResourceError, anyio.ClosedResourceError) as lost:
            raise TransientError(f"station {station}: {method} not sent: {lost}") from None
        except TimeoutError:
            raise TransientError(
                f"station {station} ({self.topics.commands(scope)}) did not answer {method} "
                f"within {timeout:g} s"
            ) from None
        status = reply.data.get("ReturnStatus") if isinstance(reply.data, Mapping) else None
        if not isinstance(status, int):
            raise GatewayError(
                f"station {station} refused {method}: {reply.errormessage or reply.errorcode}"
            )
        return Answer(status, reply.errormessage or "")

    # -- the stations' jobs -----------------------------------------------------------------

    def heard(self, station: str, job_order_id: str, state: str) -> None:
        """A job of the line at ``station`` is in ``state`` (one of the line's ids only)."""
        if upstream_of(job_order_id) is not None:
            self.jobs[station][job_order_id] = state

    def replace_jobs(self, station: str, states: Mapping[str, str]) -> None:
        """The station's state index: every job it holds (the line's, of them)."""
        self.jobs[station] = {
            job: state for job, state in states.items() if upstream_of(job) is not None
        }

    def jobs_of(self, scope: str, job: str) -> list[tuple[str, str, str]]:
        """(station, job order id, state) of every job the upstream job has at the stations."""
        found = []
        for station, jobs in self.jobs.items():
            for job_order_id, state in list(jobs.items()):
                upstream = upstream_of(job_order_id)
                if upstream is not None and (upstream.scope, upstream.job) == (scope, job):
                    found.append((station, job_order_id, state))
        return found

    # -- upstream state changes (an observer: must not block) -------------------------------

    @hookimpl
    def gateway_job_state_changed(
        self, scope: str, job_order_id: str, method: str, previous: JobState, current: JobState
    ) -> None:
        if propagated_method(previous, current) is None:
            return
        try:
            self._changes_in.send_nowait(UpstreamChange(scope, job_order_id, previous, current))
        except anyio.WouldBlock:
            log.warning(
                "line: %s/%s went %s with %d changes waiting for the stations' broker; the "
                "stations hear of it when the line reconnects (reconciliation)",
                scope,
                job_order_id,
                current,
                QUEUED_CHANGES,
            )


def propagated_method(previous: JobState, current: JobState) -> str | None:
    """The method an upstream job's change sends to its station jobs, if any."""
    if current is JobState.SUSPENDED:
        return "Pause"
    if current is JobState.RUNNING and previous.top.value == "Interrupted":
        return "Resume"
    if current is JobState.CLOSED:
        return "Stop"
    if current is JobState.ABORTED:
        return "Abort"
    return None
