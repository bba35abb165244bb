"""H6: a web page the operator visits cannot act on the station through the operator's browser.

Debian's chromium, headless, holds the operator's credentials (sent with every request it
makes, as a browser does once the operator has logged in). It visits a page of another site
(``localhost`` on another port; the gateway is ``127.0.0.1``) that posts forms to the gateway's
operator actions, API and UI alike, and frames a job page. The running job is not aborted, the
framed page shows nothing, and the MES keeps being answered meanwhile.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import ByteStream
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.testing.services import free_port
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import final_response, job_order, return_status, state_texts
from tests.security.station import HostileStation, probing

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OPERATOR = ("op", "op-secret")


@asynccontextmanager
async def attacker_site(html: str) -> AsyncIterator[int]:
    """Another site: every GET on its port answers ``html``; yields the port."""
    port = free_port()
    body = html.encode()

    async def serve(client: ByteStream) -> None:
        async with client:
            request = b""
            with anyio.move_on_after(5):
                while b"\r\n\r\n" not in request:
                    request += await client.receive()
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            await client.send(head.encode() + body)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, serve)
        yield port
        tasks.cancel_scope.cancel()


async def with_operator_credentials(browser: WebDriver) -> None:
    token = base64.b64encode(":".join(OPERATOR).encode()).decode()

    def apply() -> None:
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}}
        )

    await anyio.to_thread.run_sync(apply)


async def visit(browser: WebDriver, url: str) -> None:
    await anyio.to_thread.run_sync(browser.get, url)


async def test_another_site_cannot_abort_a_job_or_frame_its_page(
    hostile_station: HostileStation, browser: WebDriver
) -> None:
    station = hostile_station
    station.environ["GATEWAY_UI_OPERATORS"] = ":".join(OPERATOR)
    await station.start()
    gateway = f"http://127.0.0.1:{station.http_port}"
    job_path = f"/scopes/{station.scope}/jobs/J1"
    forms = "".join(
        f'<form method="post" target="sink{number}" action="{gateway}{prefix}{job_path}'
        f'/actions/abort"><input name="action" value="abort"></form>'
        f'<iframe name="sink{number}"></iframe>'
        for number, prefix in enumerate(("/api", "/ui"))
    )
    page = (
        f"<html><body>{forms}<iframe id=framed src='{gateway}/ui{job_path}'></iframe>"
        "<script>for (const form of document.forms) form.submit();"
        "window.posted = true</script></body></html>"
    )
    async with probing(station), station.mes() as mes:
        # J1 runs: it waits for the tightener, which says nothing (for 30 s).
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data
        await _until_running(mes)
        await with_operator_credentials(browser)
        async with attacker_site(page) as port:
            await visit(browser, f"http://localhost:{port}/")
            # Both posts answered (the sink frames loaded), and the framed page drew nothing.
            await _until(browser, "return window.posted === true")
            await _until(browser, SINKS_LOADED)
            framed_chart = await anyio.to_thread.run_sync(_framed_chart, browser)
        assert framed_chart is False
        response = (await mes.job_response("J1")).data
        assert state_texts(response["JobResponse"])[0] == "Running", json.dumps(response)
    # The operator's own page, on the gateway's own origin, still acts.
    status, _, _ = await station.http(
        f"/api{job_path}/actions/abort",
        method="POST",
        headers={"Authorization": f"Basic {base64.b64encode(b'op:op-secret').decode()}"},
    )
    assert status == 200
    async with station.mes() as mes:
        ended = await final_response(mes, "J1")
    assert state_texts(ended)[0] == "Aborted"


SINKS_LOADED = """
return [0, 1].every(n => {
  try { return frames[`sink${n}`].location.href !== 'about:blank' } catch (e) { return true }
})
"""


def _framed_chart(browser: WebDriver) -> bool:
    browser.switch_to.frame(browser.find_element("id", "framed"))
    try:
        return bool(browser.execute_script("return document.querySelector('svg') !== null"))
    finally:
        browser.switch_to.default_content()


async def _until(browser: WebDriver, script: str, timeout: float = 15) -> None:
    with anyio.fail_after(timeout):
        while not await anyio.to_thread.run_sync(browser.execute_script, script):  # noqa: ASYNC110
            await anyio.sleep(0.1)


async def _until_running(mes: object) -> None:
    with anyio.fail_after(15):
        while True:
            answer = await mes.job_response("J1")  # type: ignore[attr-defined]
            if state_texts(answer.data["JobResponse"])[0] == "Running":
                return
            await anyio.sleep(0.1)
