"""The web applications: the pages at ``/ui`` and the JSON API at ``/api/scopes``.

Both are Starlette applications the HTTP endpoint mounts (``gateway_register_http_apps``).
Everything is read-only, except the operator actions, which exist only when ``ui.operators``
names operators and always need one's HTTP Basic credentials.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from gateway.errors import ValidationError
from gateway.recipes import JobCommand, RequestOutcome
from gateway_ui.acknowledge import blocked_section
from gateway_ui.activity import Activity, action_stats, scope_activity
from gateway_ui.assets import JS
from gateway_ui.breakpoints import BREAKPOINT, breakpoint_arguments
from gateway_ui.dashboard import Dashboard, DashboardStream
from gateway_ui.edits import EDIT, edit_arguments
from gateway_ui.live import LiveFeed
from gateway_ui.pages import OPERATOR_ACTIONS, job_page, job_url, scope_page, scope_url
from gateway_ui.settings import UiSettings
from gateway_ui.sse import JobStream, ScopeStream, parse_cursor
from gateway_ui.station import dashboard_page, sections
from gateway_ui.timeline import Window, render_svg, timeline_json, timeline_page
from gateway_ui.trace import position, read_trace, with_latencies
from gateway_ui.views import NotFound, UiData, check

if TYPE_CHECKING:
    from gateway.phases import ServicePhase

log = logging.getLogger(__name__)

COMMANDS = {"hold": JobCommand.PAUSE, "resume": JobCommand.RESUME, "abort": JobCommand.ABORT}
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
Endpoint = Callable[[Request], Awaitable[Response]]


def _guarded(endpoint: Endpoint) -> Endpoint:
    """404 for what does not exist, 503 while job management or the store is missing."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except NotFound as error:
            return _error(404, str(error), request)
        except ValidationError as error:  # a scope id that cannot exist ({x}, spaces...)
            return _error(404, str(error), request)

    return guarded


def _error(status: int, message: str, request: Request) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    return PlainTextResponse(message + "\n", status_code=status)


class UiApplications:
    def __init__(self, gateway: ServicePhase, settings: UiSettings, feed: LiveFeed) -> None:
        self.gateway = gateway
        self.settings = settings
        self.feed = feed
        self.data = UiData(gateway)
        self.dashboard = Dashboard(gateway, self.data)
        self.operators = settings.operator_passwords()

    # -- the applications -------------------------------------------------------------------

    def pages(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/", _guarded(self.index)),
                Route("/app.js", self.script),
                Route(
                    "/scopes/{scope:path}/jobs/{job}/actions/{action}",
                    _guarded(self.page_action),
                    methods=["POST"],
                ),
                Route(
                    "/scopes/{scope:path}/equipment/{equipment}/acknowledge",
                    _guarded(self.page_acknowledge),
                    methods=["POST"],
                ),
                Route("/scopes/{scope:path}/jobs/{job}", _guarded(self.job_page)),
                Route("/scopes/{scope:path}/timeline", _guarded(self.timeline_page)),
                Route("/scopes/{scope:path}", _guarded(self.scope_page)),
            ]
        )

    def api(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/", _guarded(self.api_scopes)),
                Route("/{scope:path}/jobs/{job}/trace", _guarded(self.api_trace)),
                Route("/{scope:path}/jobs/{job}/events", _guarded(self.job_events)),
                Route(
                    "/{scope:path}/jobs/{job}/actions/{action}",
                    _guarded(self.api_action),
                    methods=["POST"],
                ),
                Route(
                    "/{scope:path}/equipment/{equipment}/acknowledge",
                    _guarded(self.api_acknowledge),
                    methods=["POST"],
                ),
                Route("/{scope:path}/jobs/{job}", _guarded(self.api_job)),
                Route("/{scope:path}/jobs", _guarded(self.api_jobs)),
                Route("/{scope:path}/queue", _guarded(self.api_queue)),
                Route("/{scope:path}/timeline", _guarded(self.api_timeline)),
                Route("/{scope:path}/events", _guarded(self.scope_events)),
            ]
        )

    def station(self) -> Starlette:
        """The dashboard's data (``/api/station``) and its event stream."""
        return Starlette(
            routes=[
                Route("/", _guarded(self.api_station)),
                Route("/events", _guarded(self.station_events)),
            ]
        )

    # -- pages ------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        return HTMLResponse(dashboard_page(await self.dashboard.station()))

    async def timeline_page(self, request: Request) -> Response:
        scope, now = check(request.path_params["scope"]), time.time()
        requested = _window(request, now)
        if isinstance(requested, Response):
            return requested
        window, done = await self._activity(request, scope, requested, now)
        svg = render_svg(done, window, now)
        stats = action_stats(done.commands)
        return HTMLResponse(timeline_page(scope, svg, stats, window, now, requested))

    async def _activity(
        self, request: Request, scope: str, window: Window, now: float
    ) -> tuple[Window, Activity]:
        """What happened in ``window``, and the window to show (``fit``: what holds it)."""
        control = self.gateway.job_control
        done = await scope_activity(control, self.data.store, scope, window.start, now)
        done = done.in_range(window.start, window.end)
        if request.query_params.get("fit"):
            window = window.fit(done, now)
        return window, done

    async def script(self, request: Request) -> Response:
        return Response(JS, media_type="text/javascript; charset=utf-8")

    async def scope_page(self, request: Request) -> Response:
        scope = request.path_params["scope"]
        stream = ScopeStream(self.data.store, scope, self.feed)
        cursor = await stream.cursor_now()  # before the read: nothing falls between the two
        jobs = await self.data.jobs(scope)
        queue = await self.data.queue(scope)
        blocked = blocked_section(scope, queue, operators=bool(self.operators))
        return HTMLResponse(scope_page(scope, jobs, cursor, queue, blocked=blocked))

    async def job_page(self, request: Request) -> Response:
        scope, job = request.path_params["scope"], request.path_params["job"]
        stream = JobStream(self.data, self.data.store, scope, job, self.feed)
        cursor = await stream.cursor_now()  # before the reads: nothing falls between
        view = await self.data.job(scope, job)
        trace = await self._trace_until(scope, job, cursor.split(",")[1])
        chart = await self.data.chart(scope, job)
        html = job_page(view, chart, trace, cursor, operators=bool(self.operators))
        return HTMLResponse(html)

    async def _trace_until(self, scope: str, job: str, last: str) -> list[dict[str, Any]]:
        store = self.data.store
        entries = await read_trace(store, scope, job)
        until = position(last)
        return with_latencies([entry for entry in entries if position(entry["id"]) <= until])

    # -- JSON -------------------------------------------------------------------------------

    async def api_scopes(self, request: Request) -> Response:
        return JSONResponse(await self.data.scopes())

    async def api_jobs(self, request: Request) -> Response:
        return JSONResponse(await self.data.jobs(request.path_params["scope"]))

    async def api_queue(self, request: Request) -> Response:
        return JSONResponse(await self.data.queue(request.path_params["scope"]))

    async def api_timeline(self, request: Request) -> Response:
        scope, now = check(request.path_params["scope"]), time.time()
        requested = _window(request, now)
        if isinstance(requested, Response):
            return requested
        window, done = await self._activity(request, scope, requested, now)
        return JSONResponse(timeline_json(scope, done, window))

    async def api_station(self, request: Request) -> Response:
        return JSONResponse(await self.dashboard.station())

    async def api_job(self, request: Request) -> Response:
        view = await self.data.job(request.path_params["scope"], request.path_params["job"])
        return JSONResponse(view)

    async def api_trace(self, request: Request) -> Response:
        scope, job = request.path_params["scope"], request.path_params["job"]
        await self.data.job(scope, job)  # NotFound for a job that does not exist
        return JSONResponse(
            {
                "scope": scope,
                "job_order_id": job,
                "max_entries": self.settings.trace_max_entries,
                "entries": await read_trace(self.data.store, scope, job),
            }
        )

    # -- live updates -----------------------------------------------------------------------

    async def job_events(self, request: Request) -> Response:
        scope, job = request.path_params["scope"], request.path_params["job"]
        await self.data.job(scope, job)
        stream = JobStream(self.data, self.data.store, scope, job, self.feed)
        cursor = resume_cursor(request, 2, trace_last=True)
        if cursor is None:
            cursor = (await stream.cursor_now()).split(",")
        return StreamingResponse(
            stream.events(cursor), media_type="text/event-stream", headers=SSE_HEADERS
        )

    async def scope_events(self, request: Request) -> Response:
        scope = await self.data.known_scope(request.path_params["scope"])
        stream = ScopeStream(self.data.store, scope, self.feed)
        cursor = resume_cursor(request, 1) or [await stream.cursor_now()]
        return StreamingResponse(
            stream.events(cursor), media_type="text/event-stream", headers=SSE_HEADERS
        )

    async def station_events(self, request: Request) -> Response:
        stream = DashboardStream(self.gateway, self.dashboard, sections, self.feed)
        return StreamingResponse(
            stream.events(), media_type="text/event-stream", headers=SSE_HEADERS
        )

    # -- operator actions -------------------------------------------------------------------

    async def page_action(self, request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return _error(403, "operator actions come from this gateway's own pages", request)
        outcome = await self._act(request)
        if isinstance(outcome, Response):
            return outcome
        scope, job = request.path_params["scope"], request.path_params["job"]
        return RedirectResponse(job_url(scope, job), status_code=303)

    async def api_action(self, request: Request) -> Response:
        outcome = await self._act(request)
        if isinstance(outcome, Response):
            return outcome
        return JSONResponse(outcome, status_code=200 if outcome["accepted"] else 409)

    async def _act(self, request: Request) -> Response | dict[str, Any]:
        if not self.operators:
            return _error(403, "operator actions are off (no ui.operators configured)", request)
        action = request.path_params["action"]
        if action not in (*OPERATOR_ACTIONS, BREAKPOINT, EDIT):
            known = "hold, resume, abort, breakpoint, edit"
            return _error(404, f"no operator action {action!r} ({known})", request)
        operator = self._operator(request)
        if operator is None:
            return Response(
                "operator credentials needed\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="gateway operators", charset="UTF-8"'},
            )
        scope, job = request.path_params["scope"], request.path_params["job"]
        await self.data.job(scope, job)
        try:
            outcome = await self._call(request, action, scope, job, f"operator {operator}")
        except ValidationError as error:  # the request's fields
            return _error(400, str(error), request)
        log.info("operator %s: %s of %s/%s: %s", operator, action, scope, job, outcome.status)
        return {"accepted": outcome.accepted, "status": outcome.status, "message": outcome.message}

    async def page_acknowledge(self, request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return _error(403, "operator actions come from this gateway's own pages", request)
        outcome = await self._acknowledge(request)
        if isinstance(outcome, Response):
            return outcome
        return RedirectResponse(scope_url(request.path_params["scope"]), status_code=303)

    async def api_acknowledge(self, request: Request) -> Response:
        outcome = await self._acknowledge(request)
        return outcome if isinstance(outcome, Response) else JSONResponse(outcome)

    async def _acknowledge(self, request: Request) -> Response | dict[str, Any]:
        """Release one blocked equipment for the operator whose credentials came along."""
        if not self.operators:
            return _error(403, "operator actions are off (no ui.operators configured)", request)
        operator = self._operator(request)
        if operator is None:
            return Response(
                "operator credentials needed\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="gateway operators", charset="UTF-8"'},
            )
        scope = await self.data.known_scope(request.path_params["scope"])
        equipment = request.path_params["equipment"]
        released = await self.gateway.job_control.acknowledge(
            scope, [equipment], f"operator {operator}"
        )
        log.info("operator %s acknowledged %s of %s: %s", operator, equipment, scope, released)
        return {"released": [dataclasses.asdict(item) for item in released]}

    async def _call(
        self, request: Request, action: str, scope: str, job: str, by: str
    ) -> RequestOutcome:
        control = self.gateway.job_control
        if action == BREAKPOINT:
            step, enabled = await breakpoint_arguments(request)
            return await control.set_breakpoint(
                scope, step, job_order_id=job, enabled=enabled, requested_by=by
            )
        if action == EDIT:
            edit, expected = await edit_arguments(request)
            return await control.edit_steps(scope, job, edit, expected=expected, requested_by=by)
        return await control.request(scope, job, COMMANDS[action], by)

    def _operator(self, request: Request) -> str | None:
        """The operator whose Basic credentials the request carries, if they are right."""
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, _, password = base64.b64decode(encoded).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        expected = self.operators.get(name)
        if expected is None or not hmac.compare_digest(password.encode(), expected.encode()):
            return None
        return name


def _window(request: Request, now: float) -> Window | Response:
    try:
        return Window.parse(request.query_params, now)
    except ValueError as error:
        return _error(400, f"bad range: {error}", request)


def resume_cursor(request: Request, parts: int, *, trace_last: bool = False) -> list[str] | None:
    """Where the browser resumes: its Last-Event-ID, else the page's ``after``."""
    resumed = parse_cursor(request.headers.get("last-event-id"), parts, trace_last=trace_last)
    return resumed or parse_cursor(request.query_params.get("after"), parts, trace_last=trace_last)
