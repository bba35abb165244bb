"""The guard in front of the UI's applications: framing refused on every answer, changes only
from the gateway's own pages, reading behind a login when viewers are configured, and slower
answers to repeated wrong logins (a real gateway over HTTP)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from gateway.testing import running

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


async def test_every_answer_refuses_framing(station: Station) -> None:
    async with running(station.gateway()):
        for path in ("/ui/", "/ui/app.js", "/api/scopes/", "/api/scopes/cell1/jobs/nope"):
            reply = await station.request(path)
            assert reply.headers.get("content-security-policy") == "frame-ancestors 'none'"
            assert reply.headers.get("x-frame-options") == "DENY"
            assert reply.headers.get("x-content-type-options") == "nosniff"


async def test_changes_from_another_site_are_refused_before_credentials_count(
    station: Station,
) -> None:
    gateway = station.gateway(GATEWAY_UI_OPERATORS="op:secret")
    action = f"/api/scopes/{SCOPE}/jobs/J1/actions/abort"
    own = f"http://127.0.0.1:{station.port}"
    async with running(gateway), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        credentials = station.basic("op", "secret")
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Referer": "http://evil.example/page"},
            {"Origin": own, "Sec-Fetch-Site": "cross-site"},
        ):
            reply = await station.request(action, "POST", {**credentials, **headers})
            assert reply.status == 403, headers
        assert (await station.get_json(f"/api/scopes/{SCOPE}/jobs/J1"))["state"] != "Aborted"
        # From its own page (or from no browser at all) the operator's credentials decide.
        reply = await station.request(action, "POST", {**credentials, "Origin": own})
        assert reply.status == 200, reply.body


async def test_viewers_make_reading_need_a_login_and_wrong_ones_wait(station: Station) -> None:
    gateway = station.gateway(GATEWAY_UI_VIEWERS="viewer:look", GATEWAY_UI_OPERATORS="op:secret")
    async with running(gateway):
        assert (await station.request("/api/scopes/")).status == 401
        assert (await station.request("/ui/")).status == 401
        assert (
            await station.request("/api/scopes/", headers=station.basic("viewer", "look"))
        ).status == 200
        assert (await station.request("/ui/", headers=station.basic("op", "secret"))).status == 200
        waits = []
        for _ in range(3):
            started = time.monotonic()
            reply = await station.request("/ui/", headers=station.basic("viewer", "wrong"))
            waits.append(time.monotonic() - started)
            assert reply.status == 401
        assert waits[0] >= 0.2
        assert waits[2] >= 0.9  # 0.25, 0.5, 1 s: doubling per failure in a row
        # Probes stay open: they are not the UI's.
        assert (await station.request("/healthz")).status == 200


async def test_odd_scope_ids_in_urls_are_404_not_500(station: Station) -> None:
    async with running(station.gateway()):
        for path in ("/ui/scopes/{x}", "/ui/scopes/a%20b", "/ui/scopes/{x}/jobs/J1"):
            assert (await station.request(path)).status == 404, path
        assert (await station.request("/api/scopes/{x}/events")).status == 404
