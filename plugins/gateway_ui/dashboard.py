"""What the station is doing now: the dashboard's data, per scope.

For each scope: online or not, each equipment's state (online, busy with which job and action
since when, its last error), the running jobs with their active steps, the queue in start
order with why each job waits, and the last failures. Read through the host's public API (job
control, the equipment hub's liveness, the recipe interpreters' progress) and the jobs' traces
(``gateway_ui.activity``), fresh on each call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from gateway.jobstates import JobState, TopState
from gateway.recipes import JobSummary, ScopeQueue
from gateway_ui.activity import Activity, CommandBar, Outcome, activity, read_traces, recent, unix
from gateway_ui.live import LiveFeed
from gateway_ui.sse import RETRY_MS, format_event, last_id
from gateway_ui.trace import trace_key
from gateway_ui.views import UiData

if TYPE_CHECKING:
    from gateway.phases import ServicePhase
    from gateway.store import Store

log = logging.getLogger(__name__)
Renderer = Callable[[Mapping[str, Any]], str]

WINDOW_SECONDS = 3600  # the last errors and failures shown come from this long back
RECENT_JOBS = 50  # the newest jobs whose traces say what the equipment did lately
MIN_REFRESH_SECONDS = 0.5  # a dashboard stream looks at the station at most this often
FAILURES_SHOWN = 5


class Dashboard:
    def __init__(self, gateway: ServicePhase, data: UiData) -> None:
        self.gateway = gateway
        self.data = data

    async def station(self) -> dict[str, Any]:
        now = time.time()
        scopes = [
            await self.scope(scope, now) for scope in sorted(await self.data.store.known_scopes())
        ]
        return {"server_time": now, "scopes": scopes}

    async def scope(self, scope: str, now: float) -> dict[str, Any]:
        control = self.gateway.job_control
        queue = await control.queue(scope)
        summaries = list(await control.jobs(scope))
        shown = recent(summaries, now - WINDOW_SECONDS, RECENT_JOBS)
        traces = await read_traces(self.data.store, scope, [job.job_order_id for job in shown])
        done = activity(shown, traces, now)
        admitted = set(queue.running)
        running = [
            job
            for job in summaries
            if job.state.top in (TopState.RUNNING, TopState.INTERRUPTED)
            or job.job_order_id in admitted
        ]
        running.sort(key=lambda job: unix(job.start_time) or unix(job.stored_at) or 0.0)
        return {
            "scope": scope,
            "online": queue.online,
            "reason": queue.reason,
            "capacity": queue.capacity,
            "equipment": await self._equipment(queue, done, now),
            "running": [await self._running(scope, job) for job in running],
            "queue": waiting_reasons(queue, now),
            "failures": await self._failures(scope, summaries, now),
        }

    async def _equipment(
        self, queue: ScopeQueue, done: Activity, now: float
    ) -> list[dict[str, Any]]:
        """Every equipment the scope's jobs hold, wait for or sent commands to lately."""
        names: set[str] = {bar.equipment for bar in done.commands}
        for held in queue.running.values():
            names.update(held)
        for waiting in queue.waiting:
            names.update(waiting.equipment)
        busy: dict[str, CommandBar] = {}
        failed: dict[str, CommandBar] = {}
        for bar in done.commands:  # oldest first: the newest wins
            if bar.outcome is Outcome.PENDING:
                busy[bar.equipment] = bar
            elif bar.outcome in (Outcome.ERROR, Outcome.UNDELIVERED, Outcome.NO_REPLY):
                failed[bar.equipment] = bar
        rows = []
        hub = self.gateway.equipment
        for name in sorted(names):
            liveness = await hub.liveness(name)
            tracked = liveness.last_seen is not None or liveness.gone_at is not None
            working = busy.get(name)
            error = failed.get(name)
            rows.append(
                {
                    "equipment": name,
                    "online": liveness.online if tracked or hub.tracks(name) else None,
                    "offline_reason": await hub.offline_reason(name),
                    "last_seen": liveness.last_seen,
                    "busy": None
                    if working is None
                    else {
                        "job_order_id": working.job,
                        "action": working.action,
                        "since": working.start,
                    },
                    "last_error": None
                    if error is None
                    else {
                        "job_order_id": error.job,
                        "action": error.action,
                        "error": error.error or "no reply",
                        "at": error.end or error.start,
                    },
                }
            )
        return rows

    async def _running(self, scope: str, job: JobSummary) -> dict[str, Any]:
        progress = await self.data.progress(scope, job.job_order_id)
        steps = (
            []
            if progress is None
            else [
                {"name": step.name, "entered_at": step.entered_at}
                for step in progress.active
                if not step.branch  # the steps inside say more than the branch holding them
            ]
        )
        actions = (
            []
            if progress is None
            else [
                {"name": action.name, "phase": action.phase, "since": action.dispatched_at}
                for action in progress.actions
                if action.phase in ("dispatched", "waiting")
            ]
        )
        return {
            "job_order_id": job.job_order_id,
            "state": job.state.value,
            "priority": job.priority,
            "started_at": unix(job.start_time),
            "steps": steps,
            "actions": actions,
            "error": None if progress is None else progress.error,
        }

    async def _failures(
        self, scope: str, summaries: Sequence[JobSummary], now: float
    ) -> list[dict[str, Any]]:
        """The newest jobs that aborted or were held, with why."""
        failed = [
            job
            for job in summaries
            if job.state.top is TopState.ABORTED or job.state is JobState.HELD
        ]
        failed.sort(key=lambda job: unix(job.end_time) or unix(job.start_time) or 0.0, reverse=True)
        rows = []
        for job in failed[:FAILURES_SHOWN]:
            at = unix(job.end_time) or unix(job.start_time)
            if at is not None and at < now - WINDOW_SECONDS:
                continue
            rows.append(
                {
                    "job_order_id": job.job_order_id,
                    "state": job.state.value,
                    "at": at,
                    "error": await self._why(scope, job.job_order_id),
                }
            )
        return rows

    async def _why(self, scope: str, job: str) -> str | None:
        progress = await self.data.progress(scope, job)
        if progress is not None and progress.error:
            return progress.error
        response = await self.gateway.job_control.response(scope, job)
        return _description(response)


def _description(response: Mapping[str, Any] | None) -> str | None:
    description = (response or {}).get("Description")
    if isinstance(description, Mapping):
        text = description.get("Text")
        return text if isinstance(text, str) and text else None
    return description if isinstance(description, str) and description else None


def waiting_reasons(queue: ScopeQueue, now: float) -> list[dict[str, Any]]:
    """The waiting jobs in start order, each with why it has not started, as the dispatcher
    decides: the scope offline, its StartTime not reached, no free slot (capacity), or
    equipment a running job holds or a job before it reserved (as the dispatcher, a due job
    reserves its equipment for itself against the jobs after it)."""
    held: dict[str, str] = {}  # equipment -> the job holding or reserving it
    for job, equipment in queue.running.items():
        for name in equipment:
            held[name] = job
    running = len(queue.running)
    rows = []
    for entry in queue.waiting:
        start = unix(entry.start_time)
        busy = [name for name in entry.equipment if name in held]
        if not queue.online:
            kind, text = "offline", "scope offline" + (f": {queue.reason}" if queue.reason else "")
        elif start is not None and start > now:  # even a free slot would not start it
            kind, text = "start_time", f"StartTime {entry.start_time}"
        elif queue.capacity and running >= queue.capacity:
            kind, text = "capacity", f"capacity: {running} of {queue.capacity} running"
        elif busy:
            holders = ", ".join(f"{name} ({held[name]})" for name in busy)
            kind, text = "equipment", f"equipment in use: {holders}"
        else:
            kind, text = "next", "starts at the next dispatch"
        if kind == "next":
            running += 1  # it takes a slot
        if kind != "start_time":
            for name in entry.equipment:
                held.setdefault(name, entry.job_order_id)  # it reserves what it needs
        rows.append(
            {
                "job_order_id": entry.job_order_id,
                "position": entry.position,
                "priority": entry.priority,
                "start_time": entry.start_time,
                "equipment": list(entry.equipment),
                "reason": kind,
                "why": text,
            }
        )
    return rows


class DashboardStream:
    """The dashboard's events: a fresh ``dashboard`` event whenever what it shows changed.

    It follows every scope's change stream and the traces of the jobs running now (so a step
    entered or a command answered shows at once), and looks again at least every
    ``live.KEEPALIVE_SECONDS`` for what no stream records (equipment going offline, time passing a
    StartTime). The event carries the rendered sections, so the page and the stream draw alike.
    """

    def __init__(
        self, gateway: ServicePhase, dashboard: Dashboard, render: Renderer, feed: LiveFeed
    ) -> None:
        self.gateway = gateway
        self.dashboard = dashboard
        self.render = render
        self.feed = feed  # the shared reader: no Redis connection held per open dashboard

    async def events(self) -> AsyncGenerator[str]:
        store = self.dashboard.data.store
        positions: dict[str, str] = {}
        yield f"retry: {RETRY_MS}\n\n"
        snapshot = await self._follow(store, positions)
        last = self.render(snapshot)
        failed = ""  # the last error logged, once while it lasts
        yield _event(last, snapshot)
        looked = anyio.current_time()
        while not self.gateway.stopping.is_set():
            batch = await self.feed.wait(positions)
            for stream, entries in batch or ():
                positions[stream] = entries[-1][0]
            # Pacing, not synchronisation: a busy station's trace wakes the stream every flush;
            # what comes meanwhile is in the next look.
            await anyio.sleep(max(0.0, looked + MIN_REFRESH_SECONDS - anyio.current_time()))
            looked = anyio.current_time()
            try:
                snapshot = await self._follow(store, positions)
            except Exception as error:  # the store away: the next read says so (ui.live)
                if self.gateway.stopping.is_set():
                    return
                if str(error) != failed:
                    log.warning("dashboard not refreshed: %s", error)
                failed = str(error)
                yield ": waiting\n\n"
                continue
            failed = ""
            html = self.render(snapshot)
            if html == last:
                yield ": unchanged\n\n"
                continue
            last = html
            yield _event(html, snapshot)

    async def _follow(self, store: Store, positions: dict[str, str]) -> dict[str, Any]:
        """The dashboard now; ``positions`` made to follow the scopes' change streams and the
        running jobs' traces (from where they are now: the snapshot covers what came before)."""
        snapshot = await self.dashboard.station()
        wanted = {store.keys.global_changes()}  # a new scope
        for scope in snapshot["scopes"]:
            wanted.add(store.keys.changes(scope["scope"]))
            for job in scope["running"]:
                wanted.add(trace_key(store, scope["scope"], job["job_order_id"]))
        for key in list(positions):
            if key not in wanted:
                del positions[key]
        for key in wanted - set(positions):
            positions[key] = await last_id(store, key)
        return snapshot


def _event(html: str, snapshot: Mapping[str, Any]) -> str:
    return format_event("dashboard", {"html": html, "server_time": snapshot["server_time"]})
