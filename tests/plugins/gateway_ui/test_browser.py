"""The job page in a real browser: Debian's chromium driven headless through chromedriver.

One browser for the module. A gateway runs the rear-axle recipe on the simulated station; the
browser reaches the gateway through a TCP proxy the test can cut, so the page's live
connection (Server-Sent Events) can be broken and restored while the job goes on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio.abc import ByteStream, TaskStatus
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.testing import running
from gateway.testing.services import free_port

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ACTIVE_STEPS = (
    "return [...document.querySelectorAll('svg.sfc g.step.active')].map(g => g.dataset.step)"
)
PAGE_TRACE = "return [...document.querySelectorAll('#trace tbody tr')].map(row => row.dataset.id)"


class CuttableProxy:
    """A TCP proxy to the gateway whose connections the test can cut, and refuse until
    restored (a network outage as the browser sees it)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.open = True
        self._connections: set[anyio.CancelScope] = set()

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        async with listener:
            task_status.started()
            await listener.serve(self._connection)

    def cut(self) -> None:
        self.open = False
        for scope in list(self._connections):
            scope.cancel()

    def restore(self) -> None:
        self.open = True

    async def _connection(self, client: ByteStream) -> None:
        async with client:
            if not self.open:
                return
            with anyio.CancelScope() as scope:
                self._connections.add(scope)
                try:
                    upstream = await anyio.connect_tcp("127.0.0.1", self.target_port)
                    async with upstream, anyio.create_task_group() as pumps:
                        pumps.start_soon(_pump, client, upstream, pumps.cancel_scope)
                        pumps.start_soon(_pump, upstream, client, pumps.cancel_scope)
                finally:
                    self._connections.discard(scope)


async def _pump(source: ByteStream, sink: ByteStream, done: anyio.CancelScope) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    done.cancel()


async def run_js(browser: WebDriver, script: str, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: browser.execute_script(script, *args))


async def until_js(browser: WebDriver, script: str, timeout: float = 30) -> Any:
    """Poll ``script`` in the page until it returns something true; that value."""
    with anyio.fail_after(timeout):
        while not (value := await run_js(browser, script)):  # noqa: ASYNC110
            await anyio.sleep(0.1)
    return value


async def trace_entries(station: Station, job: str) -> list[dict[str, Any]]:
    return list((await station.get_json(f"/api/scopes/cell1/jobs/{job}/trace"))["entries"])


async def api_trace(station: Station, job: str) -> list[str]:
    return [entry["id"] for entry in await trace_entries(station, job)]


def screenshot_path(tmp_path: Path, name: str) -> Path:
    """Where a screenshot goes: ``GATEWAY_UI_SCREENSHOT_DIR`` when set, else the test's tmp."""
    directory = Path(os.environ.get("GATEWAY_UI_SCREENSHOT_DIR") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name


async def test_the_job_page_follows_a_running_job_live_and_through_a_cut(
    station: Station, browser: WebDriver, tmp_path: Path
) -> None:
    proxy = CuttableProxy(station.port)
    async with (
        running(station.gateway(seconds=2)),
        station.mes() as mes,
        anyio.create_task_group() as tasks,
    ):
        await tasks.start(proxy.serve)
        await station.start_rear_axle(mes, "J1")
        url = f"http://127.0.0.1:{proxy.port}/ui/scopes/cell1/jobs/J1"
        await anyio.to_thread.run_sync(browser.get, url)
        await run_js(browser, "window.loadedOnce = true")
        assert (
            await run_js(browser, "return document.querySelectorAll('svg.sfc g.step').length") == 7
        )

        # The lit step follows the job, without a reload (whichever steps the page first saw
        # on a loaded machine, the lit ones change while it stays open).
        first = await until_js(browser, ACTIVE_STEPS)
        with anyio.fail_after(30):
            while (changed := await run_js(browser, ACTIVE_STEPS)) in ([], first):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert set(changed) != set(first)
        assert set(changed) <= {"Positioning", "TightenBolts", "QaCheck", "VerifyTorque"}
        running_shot = screenshot_path(tmp_path, "job-page-running.png")
        assert await anyio.to_thread.run_sync(browser.save_screenshot, str(running_shot))

        # Cut the page's connection; the job goes on to its end meanwhile.
        job = (await station.get_json("/api/scopes/cell1/jobs/J1"))["state"]
        assert job == "Running", "the job ended before the test could cut the connection"
        proxy.cut()
        await until_js(
            browser, "return document.getElementById('connection').className === 'reconnecting'"
        )
        with anyio.fail_after(30):
            while (await station.get_json("/api/scopes/cell1/jobs/J1"))[  # noqa: ASYNC110
                "state"
            ] != "Ended.Completed":
                await anyio.sleep(0.1)
        missed = set(await api_trace(station, "J1")) - set(await run_js(browser, PAGE_TRACE))
        assert missed  # transitions happened while the page was cut off
        proxy.restore()

        # Back: the page catches up from where it was, and shows the results.
        await until_js(
            browser, "return document.getElementById('state').textContent === 'Ended.Completed'"
        )
        await until_js(
            browser, "return document.querySelector('#results tr[data-id=verify]') !== null"
        )
        # The trace is written a flush interval after the job changes: until its end is in
        # it, the page and the API may both be behind.
        with anyio.fail_after(30):
            while True:
                entries = await trace_entries(station, "J1")
                ended = any(
                    e["kind"] == "state" and e["current"] == "Ended.Completed" for e in entries
                )
                expected = [entry["id"] for entry in entries]
                if ended and await run_js(browser, PAGE_TRACE) == expected:
                    break
                await anyio.sleep(0.1)
        assert await run_js(browser, "return window.loadedOnce === true")  # never reloaded
        assert await run_js(browser, ACTIVE_STEPS) == []
        steps = await run_js(
            browser,
            "return [...document.querySelectorAll('#trace tr[data-kind=step]')]"
            ".map(row => row.dataset.step + ':' + row.dataset.active)",
        )
        assert "VerifyTorque:true" in steps  # entered and left during the cut
        assert "VerifyTorque:false" in steps
        results = await run_js(
            browser, "return [...document.querySelectorAll('#results tr')].map(r => r.dataset.id)"
        )
        assert {"RecipeVersion", "position_axle", "tighten", "camera_qa", "verify"} <= set(results)
        ended = await run_js(browser, "return document.getElementById('ended').textContent")
        assert ended.startswith("20")  # the end time arrived live
        path = screenshot_path(tmp_path, "job-page.png")
        assert await anyio.to_thread.run_sync(browser.save_screenshot, str(path))
        print(f"screenshots of the job page: {running_shot}, {path}")
        tasks.cancel_scope.cancel()
    assert path.stat().st_size > 10_000


async def test_without_operators_the_page_has_no_actions_and_none_acts(
    station: Station, browser: WebDriver
) -> None:
    async with running(station.gateway(seconds=1.5)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        url = f"http://127.0.0.1:{station.port}/ui/scopes/cell1/jobs/J1"
        await anyio.to_thread.run_sync(browser.get, url)
        await until_js(browser, "return document.getElementById('state').textContent === 'Running'")
        assert await run_js(browser, "return document.querySelectorAll('button, form').length") == 0
        hold = (
            "const done = arguments[arguments.length - 1];"
            "fetch(location.pathname + '/actions/hold', {method: 'POST'})"
            ".then(response => done(response.status))"
        )
        status = await anyio.to_thread.run_sync(lambda: browser.execute_async_script(hold))
        assert status == 403
        assert (await station.get_json("/api/scopes/cell1/jobs/J1"))["state"] == "Running"


QUEUE_ROWS = (
    "return [...document.querySelectorAll('#queue tbody tr')].map(row => row.cells[1].textContent)"
)
QUEUE_STATE = "return document.getElementById('queue-state').textContent"


async def test_the_scope_page_keeps_its_queue_current(station: Station, browser: WebDriver) -> None:
    async with running(station.gateway(seconds=0.5)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1", "J2")  # one station: J2 waits for J1
        url = f"http://127.0.0.1:{station.port}/ui/scopes/cell1"
        await anyio.to_thread.run_sync(browser.get, url)
        assert "online" in await run_js(browser, QUEUE_STATE)
        await mes.configure("online", {"Online": False, "Reason": "tool change"})
        # Without a reload, the section learns that the scope went offline and J1 ended.
        await until_js(
            browser,
            QUEUE_STATE.replace("textContent", "textContent.includes('offline: tool change')"),
        )
        with anyio.fail_after(30):
            while await run_js(browser, QUEUE_ROWS) != ["J2"]:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        await mes.configure("online", {"Online": True})
        await until_js(
            browser, QUEUE_STATE.replace("textContent", "textContent.startsWith('Scope online')")
        )
