"""Following the stations' jobs, as their MES does: results back to the line, its controls on.

``LineFollower`` (a service of every instance that runs recipes) keeps the line's connection to
the stations' broker, and for each station subscribes to what the gateway publishes for its MES:

- the retained ``state-index`` (and its pages, ``index/+``, when the station's publisher pages
  it): every job the station holds; the line's jobs among them (by
  their ids, ``orders.upstream_of``) are the ones the upstream controls reach, and each index
  (and every ``reconcile_seconds`` besides) is **reconciled** against the upstream jobs: a
  station job whose upstream job has ended or was aborted meanwhile (a crash, a broker outage)
  is aborted (stopped, for a Stop), and on the first index after (re)connecting a paused
  upstream job pauses its station jobs and a running one resumes them;
- the retained ``result/+`` and the status ``events``: a station job that has ended gives the
  upstream action its reply (``orders.outcome``), recorded durably by the recipe runtime; only
  then is the station job cleared (the MES's acknowledgement), so a crash in between reads the
  retained result again after the restart.

Upstream Pause, Resume, Stop and Abort (``StationLink`` hears them) are passed on at once to the
station jobs of that upstream job.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ObjectReceiveStream, TaskStatus

from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.equipment import EquipmentReply
from gateway.errors import GatewayError, NotPermitted
from gateway.jobstates import JobState
from gateway.mqttclient import CloudEventClient
from gateway_line.link import StationLink, propagated_method
from gateway_line.orders import is_final, outcome, state_texts, upstream_of
from gateway_mqtt.clients import connect_client

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

RECONNECT_MIN_SECONDS = 0.2
SETTLED_REMEMBERED = 1000


class LineFollower:
    """The service: connects, follows every station, passes the upstream controls on."""

    name = "line"
    roles = frozenset({"gateway", "engine"})  # where recipes run, hence the line's commands

    def __init__(self, link: StationLink, url: str, client_id: str) -> None:
        self.link = link
        self.url = url  # with the credentials, never logged
        self.client_id = client_id
        self._settling: set[str] = set()  # station jobs whose reply is being recorded here
        # Station jobs settled lately: their status event and retained result both say so.
        self._settled: deque[str] = deque(maxlen=SETTLED_REMEMBERED)
        self._uncleared: dict[str, str] = {}  # settled station job -> its station: Clear failed

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        task_status.started()
        delay = RECONNECT_MIN_SECONDS
        while not gateway.stopping.is_set():
            try:
                async with connect_client(
                    self.url, self.client_id, reply_prefix=self.link.settings.reply_prefix
                ) as client:
                    delay = RECONNECT_MIN_SECONDS
                    await self._follow(gateway, client)
            except Exception as error:  # the broker went away, Redis failed a reply: again
                log.warning(
                    "line: following the stations failed (%s); again in %.1f s", error, delay
                )
            finally:
                self.link.connected(None)
            with anyio.move_on_after(delay):
                await gateway.stopping.wait()
            delay = min(delay * 2, self.link.settings.reconnect_max_seconds)

    async def _follow(self, gateway: Gateway, client: CloudEventClient) -> None:
        topics = self.link.topics
        async with AsyncExitStack() as stack, anyio.create_task_group() as tasks:
            for station in self.link.stations.values():
                name, scope = station.equipment, station.scope
                index = await stack.enter_async_context(client.watch(topics.state_index(scope)))
                results = await stack.enter_async_context(client.watch(topics.result(scope, "+")))
                events = await stack.enter_async_context(client.watch(topics.events(scope)))
                pages = await stack.enter_async_context(client.watch(topics.index_page(scope, "+")))
                tasks.start_soon(self._follow_index, gateway, name, index)
                tasks.start_soon(self._follow_index_pages, name, pages)
                tasks.start_soon(self._follow_results, gateway, name, results)
                tasks.start_soon(self._follow_events, gateway, name, events)
            self.link.connected(client)
            log.info("line: following stations %s", ", ".join(self.link.stations))
            tasks.start_soon(self._pass_on_changes)
            tasks.start_soon(self._reconcile_now_and_then, gateway)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()

    # -- what the stations publish ----------------------------------------------------------

    async def _follow_index(
        self, gateway: Gateway, station: str, messages: ObjectReceiveStream[MqttMessage]
    ) -> None:
        first = True
        async for message in messages:
            if not message.payload:
                continue
            states = indexed_states(from_mqtt(message).data)
            if states is not None:  # a paged index lists pages: its jobs come on their own
                self.link.replace_jobs(station, states)
            await self._reconcile(gateway, station, catching_up=first)
            first = False

    async def _follow_index_pages(
        self, station: str, messages: ObjectReceiveStream[MqttMessage]
    ) -> None:
        """The pages of a station's paged index (``publisher.index_pages``): jobs heard of."""
        async for message in messages:
            if message.payload:
                for job_order_id, state in (indexed_states(from_mqtt(message).data) or {}).items():
                    self.link.heard(station, job_order_id, state)

    async def _follow_results(
        self, gateway: Gateway, station: str, messages: ObjectReceiveStream[MqttMessage]
    ) -> None:
        async for message in messages:
            if message.payload:  # zero bytes: the topic was deleted (a Clear)
                await self._settle(gateway, station, from_mqtt(message).data)

    async def _follow_events(
        self, gateway: Gateway, station: str, messages: ObjectReceiveStream[MqttMessage]
    ) -> None:
        async for message in messages:
            data = from_mqtt(message).data
            if not isinstance(data, Mapping) or not isinstance(data.get("JobOrder"), Mapping):
                continue
            job_order_id = str(data["JobOrder"].get("JobOrderID", ""))
            self.link.heard(station, job_order_id, ".".join(state_texts(data.get("JobState"))[:2]))
            if isinstance(data.get("JobResponse"), Mapping):
                await self._settle(gateway, station, data["JobResponse"])

    # -- a station job ended ----------------------------------------------------------------

    async def _settle(self, gateway: Gateway, station: str, response: Any) -> None:
        """Reply to the upstream action with the station job's end, then Clear the job."""
        if not isinstance(response, Mapping):
            return
        job_order_id = str(response.get("JobOrderID", ""))
        upstream = upstream_of(job_order_id)
        ended = outcome(station, response)
        if upstream is None or ended is None:
            return
        if job_order_id in self._settling or job_order_id in self._settled:
            return
        self._settling.add(job_order_id)
        try:
            if await gateway.job_control.state(upstream.scope, upstream.job) is None:
                log.debug(
                    "line: station %s job %s is no job of this gateway", station, job_order_id
                )
                return
            reply = EquipmentReply(
                str(upstream.correlation),
                data=ended.data,
                error=ended.error,
                scope=upstream.scope,
                equipment=station,
            )
            try:
                await gateway.equipment.reply(reply)
            except NotPermitted as refused:  # the try ended already (aborted, timed out)
                log.info("line: station %s job %s: %s", station, job_order_id, refused)
            self._settled.append(job_order_id)
            await self._clear(station, job_order_id)
        finally:
            self._settling.discard(job_order_id)

    async def _clear(self, station: str, job_order_id: str) -> None:
        """Clear a station job whose end the line has recorded; one the station could not be
        asked to clear is cleared again with the next reconciliation."""
        self._uncleared[job_order_id] = station
        try:
            answer = await self.link.call(station, "Clear", {"JobOrderID": job_order_id})
        except GatewayError as error:
            log.warning("line: station %s job %s not cleared yet: %s", station, job_order_id, error)
            return
        del self._uncleared[job_order_id]
        if answer.ok:
            self.link.jobs[station].pop(job_order_id, None)

    # -- the upstream controls --------------------------------------------------------------

    async def _pass_on_changes(self) -> None:
        async for change in self.link.changes:
            method = propagated_method(change.previous, change.current)
            for station, job_order_id, state in self.link.jobs_of(change.scope, change.job):
                if method is not None and not is_final(state.split(".")):
                    await self._control(station, job_order_id, method)

    async def _control(self, station: str, job_order_id: str, method: str) -> None:
        try:
            answer = await self.link.call(station, method, {"JobOrderID": job_order_id})
        except GatewayError as error:
            log.warning("line: %s of station %s job %s: %s", method, station, job_order_id, error)
            return
        log.info(
            "line: %s of station %s job %s: ReturnStatus %d %s",
            method,
            station,
            job_order_id,
            answer.status,
            answer.message,
        )

    async def _reconcile_now_and_then(self, gateway: Gateway) -> None:
        """Between the stations' index updates too: a line job that ended while its Abort or
        Stop was lost (the instance that made the change died first) ends its station jobs, and
        a Clear the station did not get is sent again."""
        while True:
            await anyio.sleep(self.link.settings.reconcile_seconds)
            for job_order_id, station in list(self._uncleared.items()):
                await self._clear(station, job_order_id)
            for station in self.link.stations:
                await self._reconcile(gateway, station, catching_up=False)

    async def _reconcile(self, gateway: Gateway, station: str, *, catching_up: bool) -> None:
        for job_order_id, state in list(self.link.jobs[station].items()):
            upstream = upstream_of(job_order_id)
            if upstream is None or is_final(state.split(".")):
                continue
            upstream_state = await gateway.job_control.state(upstream.scope, upstream.job)
            method = reconciling_method(upstream_state, state, catching_up=catching_up)
            if method is not None:
                await self._control(station, job_order_id, method)


def reconciling_method(
    upstream: JobState | None, station_state: str, *, catching_up: bool
) -> str | None:
    """What a station job in ``station_state`` needs so it follows its upstream job's state.

    An upstream job that has ended (or was aborted) ends its station jobs, whenever the line
    sees them; Pause and Resume are made up for only when catching up (after a restart or a
    broker outage), so that an operator pausing the station job by hand is not overruled.
    """
    if upstream is None:  # not a job of this gateway (another line shares the station)
        return None
    if upstream.final:
        return "Stop" if upstream is JobState.CLOSED else "Abort"
    if not catching_up:
        return None
    if upstream is JobState.SUSPENDED and station_state == "Running":
        return "Pause"
    if upstream is JobState.RUNNING and station_state == "Interrupted.Suspended":
        return "Resume"
    return None


def indexed_states(data: Any) -> dict[str, str] | None:
    """Job order id -> state (``Ended.Completed``) of a state index or of one of its pages;
    ``None`` when it lists no jobs (a paged index lists its pages)."""
    jobs = data.get("jobs") if isinstance(data, Mapping) else None
    if not isinstance(jobs, list):
        return None
    return {
        str(job.get("job_order_id")): ".".join(state_texts(job.get("state"))[:2])
        for job in jobs
        if isinstance(job, Mapping)
    }
