"""What stands between the UI's applications and a visitor: ASGI middleware around each of them.

- **Every page refuses to be framed** (``Content-Security-Policy: frame-ancestors 'none'`` and
  ``X-Frame-Options: DENY``), so a click on a gateway page inside another site's frame cannot
  happen; answers are never sniffed as another type (``X-Content-Type-Options: nosniff``) and
  the address of a page goes to no other site (``Referrer-Policy: same-origin``).
- **A request that changes something comes from the gateway's own pages.** Any method but
  GET/HEAD/OPTIONS with an ``Origin`` (or, without one, a ``Referer``) of another site, with
  ``Origin: null`` (a sandboxed frame, a ``data:`` page), or marked ``Sec-Fetch-Site:
  cross-site`` by the browser is refused with 403 before it reaches an application: a form
  another site posts with the operator's stored credentials does nothing. A client that is no
  browser sends neither header and is let through to the operator's credentials check.
  ``ui.trusted_origins`` adds the address a reverse proxy serves the UI under. No cookie is
  ever set (logins are HTTP Basic), so there is no session a third-party request could ride.
- **Reading may need a login** (``ui.viewers``; operators may read too). Wrong credentials are
  answered after a delay that grows with the failures in a row from that address.
- **Live event streams are bounded**: at most ``ui.max_streams`` at once, at most
  ``ui.max_streams_per_client`` per client address (429 beyond, with ``Retry-After``), and each
  ends after ``ui.stream_max_seconds`` (the browser reconnects and resumes from its cursor).
  A stream is any GET whose path ends in ``/events``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.peers import LoginThrottle, LogOnce
from gateway_ui.settings import UiSettings

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PAGE_HEADERS = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
RETRY_AFTER_SECONDS = 5
REALM = 'Basic realm="gateway", charset="UTF-8"'


class Guard:
    """The limits and checks shared by every UI application (one per gateway)."""

    def __init__(self, settings: UiSettings) -> None:
        self.settings = settings
        self.viewers = settings.viewer_passwords()
        self.operators = settings.operator_passwords()
        self.trusted_origins = frozenset(origin.rstrip("/") for origin in settings.trusted_origins)
        self.streams = 0
        self.streams_of: Counter[str] = Counter()
        self.throttle = LoginThrottle()
        self.refusals = LogOnce(log)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            await self._serve(app, scope, receive, _with_page_headers(send))

        return guarded

    async def _serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        client = _client(scope)
        method = scope["method"]
        if method not in SAFE_METHODS and not self._same_origin(scope, headers):
            self.refusals.report(
                client,
                "refused a %s of %s from %s: not sent by the gateway's own pages (Origin %r)",
                method,
                scope.get("path"),
                client,
                headers.get("origin") or headers.get("referer"),
            )
            answer = _error(
                scope, 403, "requests that change something come from this gateway's pages"
            )
            await answer(scope, receive, send)
            return
        refused = await self._login(scope, headers, client)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if method == "GET" and scope.get("path", "").endswith("/events"):
            await self._stream(app, scope, receive, send, client)
            return
        await app(scope, receive, send)

    # -- origin ------------------------------------------------------------------------------

    def _same_origin(self, scope: Scope, headers: Headers) -> bool:
        if headers.get("sec-fetch-site") == "cross-site":
            return False
        origin = headers.get("origin")
        if origin is None:
            referer = headers.get("referer")
            if referer is None:
                return True  # no browser: the credentials decide
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        origin = origin.rstrip("/")
        if origin == "null":
            return False
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
        return origin == own or origin in self.trusted_origins

    # -- logins ------------------------------------------------------------------------------

    async def _login(self, scope: Scope, headers: Headers, client: str) -> Response | None:
        """A refusal (401), or ``None`` to go on: wrong credentials are refused after a delay;
        none at all only when ``ui.viewers`` makes reading need a login."""
        credentials = basic_credentials(headers.get("authorization"))
        if credentials is None:
            if self.viewers and headers.get("authorization") is None:
                return _login_needed(scope)
            if headers.get("authorization") is None:
                return None
        elif _matches(self.viewers, *credentials) or _matches(self.operators, *credentials):
            self.throttle.succeeded(client)
            return None
        if not self.viewers and not self.operators:
            return None  # nobody logs in here: a header meant for something else
        delay = self.throttle.failed(client)
        self.refusals.report(client, "failed login to the web UI from %s", client)
        await anyio.sleep(delay)
        return _login_needed(scope)

    # -- live event streams ------------------------------------------------------------------

    async def _stream(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, client: str
    ) -> None:
        settings = self.settings
        if self.streams >= settings.max_streams:
            await self._too_many(scope, receive, send, client, f"{settings.max_streams} in all")
            return
        if self.streams_of[client] >= settings.max_streams_per_client:
            limit = f"{settings.max_streams_per_client} per client address"
            await self._too_many(scope, receive, send, client, limit)
            return
        self.streams += 1
        self.streams_of[client] += 1
        try:
            await _for_at_most(settings.stream_max_seconds, app, scope, receive, send)
        finally:
            self.streams -= 1
            self.streams_of[client] -= 1
            if not self.streams_of[client]:
                del self.streams_of[client]

    async def _too_many(
        self, scope: Scope, receive: Receive, send: Send, client: str, limit: str
    ) -> None:
        self.refusals.report(client, "live event stream for %s refused: %s", client, limit)
        answer = _error(scope, 429, f"too many live event streams ({limit})")
        answer.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        await answer(scope, receive, send)


async def _for_at_most(
    seconds: float, app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> None:
    """Run a streaming ``app`` for at most ``seconds``, then end its response cleanly."""
    started = finished = False

    async def watched(message: Message) -> None:
        nonlocal started, finished
        if message["type"] == "http.response.start":
            started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            finished = True
        await send(message)

    with anyio.move_on_after(seconds):
        await app(scope, receive, watched)
    if started and not finished:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _with_page_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {name.lower() for name, _ in message.get("headers", ())}
            extra = [(name, value) for name, value in PAGE_HEADERS if name not in present]
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return sending


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(name, password) of an HTTP Basic ``Authorization`` header, ``None`` if it is none."""
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        name, colon, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (name, password) if colon else None


def _matches(passwords: Mapping[str, str], name: str, password: str) -> bool:
    expected = passwords.get(name)
    return expected is not None and hmac.compare_digest(password.encode(), expected.encode())


def _client(scope: Scope) -> str:
    client: Any = scope.get("client")
    return str(client[0]) if client else "unknown"


def _login_needed(scope: Scope) -> Response:
    answer = _error(scope, 401, "credentials needed")
    answer.headers["WWW-Authenticate"] = REALM
    return answer


def _error(scope: Scope, status: int, message: str) -> Response:
    if str(scope.get("root_path", "")).startswith("/api"):
        return JSONResponse({"error": message}, status_code=status)
    return PlainTextResponse(message + "\n", status_code=status)


def guarded_register(
    register: Callable[[str, ASGIApp], None], guard: Guard
) -> Callable[[str, ASGIApp], None]:
    """``register`` of ``gateway_register_http_apps`` with every application behind ``guard``."""

    def registering(prefix: str, app: ASGIApp) -> None:
        register(prefix, guard.wrap(app))

    return registering
