"""The station dashboard, the timeline and the job page's actions in a real browser (Debian's
chromium, headless through chromedriver), driving the simulated station.

Screenshots go to ``GATEWAY_UI_SCREENSHOT_DIR`` when set (``docs/`` holds the ones the
documentation shows), else to the test's temporary directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.testing import running
from tests.plugins.gateway_ui.test_browser import (
    run_js,
    screenshot_path,
    until_js,
)

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OPERATORS = {"GATEWAY_UI_OPERATORS": "alice:secret"}
RUNNING_STEPS = (
    "const row = document.querySelector('#station .running tr[data-job=J1]');"
    "return row ? row.dataset.steps : null"
)
NO_SIDEWAYS_SCROLL = (
    "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
)

WIDEST = (  # what sticks out, to say so when a page scrolls sideways
    "const w = document.documentElement.clientWidth;"
    "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
    " > w).slice(-3).map(e => e.tagName + '.' + e.className + ' ' + e.getBoundingClientRect()"
    ".right)"
)


async def resize(browser: WebDriver, width: int, height: int) -> None:
    await anyio.to_thread.run_sync(browser.set_window_size, width, height)
    await until_js(browser, f"return window.innerWidth === {width}", timeout=10)


async def fits(browser: WebDriver, *widths: int) -> None:
    """The page shows without sideways scrolling at each width."""
    for width in widths:
        await resize(browser, width, 800)
        wide = await run_js(browser, WIDEST)
        assert await run_js(browser, NO_SIDEWAYS_SCROLL), f"scrolls sideways at {width} px: {wide}"


async def test_the_dashboard_follows_the_station_live(
    station: Station, browser: WebDriver, tmp_path: Path
) -> None:
    # Tightening fails every time: J1 fails in TightenBolts, after Positioning; J2 waits.
    gateway = station.gateway(
        seconds=2,
        GATEWAY_SIMULATOR_FAILURE_RATE="1",
        GATEWAY_SIMULATOR_HEARTBEAT_SECONDS="30",  # a gone camera stays gone for the test
        **OPERATORS,
    )
    async with running(gateway), station.mes() as mes:
        # The page is open before the jobs come: it sees J1 from its first step on.
        await resize(browser, 1280, 800)
        await anyio.to_thread.run_sync(browser.get, f"http://127.0.0.1:{station.port}/ui/")
        await run_js(browser, "window.loadedOnce = true")
        await until_js(browser, "return document.getElementById('connection').className === 'live'")
        await station.start_rear_axle(mes, "J1", "J2")

        # The waiting job, with why (it waits as long as J1 runs).
        why = await until_js(
            browser,
            "const row = document.querySelector('#station .queue tr[data-job=J2]');"
            "return row && row.dataset.reason === 'capacity' && row.querySelector('.why')"
            ".textContent",
        )
        assert why == "capacity: 1 of 1 running"

        # The running job's current step changes on the page, without a reload.
        first = await until_js(browser, RUNNING_STEPS)
        with anyio.fail_after(30):
            while (steps := await run_js(browser, RUNNING_STEPS)) in (None, "", first):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert steps != first
        assert set(first.split(",") + (steps or "").split(",")) <= {
            "Positioning",
            "TightenBolts",
            "QaCheck",
            "",
        }

        # J1's tightening fails: the failure shows with its reason, the tightener's last error.
        reason = await until_js(
            browser,
            "const row = document.querySelector('#station .failures tr[data-job=J1]');"
            "return row && row.querySelector('.bad').textContent",
        )
        assert "tighten" in reason
        assert await until_js(
            browser,
            "const row = document.querySelector('#station tr[data-equipment=tightener]');"
            "return row && row.cells[3].textContent.includes('tighten')",
        )

        # Equipment going offline.
        camera = "document.querySelector('#station tr[data-equipment=camera]')"
        assert await until_js(browser, f"return {camera}?.dataset.online === 'true'")
        await gateway.equipment.gone("camera", "cable pulled")
        await until_js(browser, f"return {camera}?.dataset.online === 'false'")
        title = await run_js(browser, f"return {camera}.querySelector('.offline').title")
        assert "cable pulled" in title
        assert await run_js(browser, "return window.loadedOnce === true")  # never reloaded

        await fits(browser, 1280, 1024)
        await resize(browser, 1280, 800)
        path = screenshot_path(tmp_path, "ui-dashboard.png")
        assert await anyio.to_thread.run_sync(browser.save_screenshot, str(path))

        # The failed job's page: the failed step marked, and no action on an ended job.
        job_page = f"http://127.0.0.1:{station.port}/ui/scopes/cell1/jobs/J1"
        await anyio.to_thread.run_sync(browser.get, job_page)
        state = await until_js(browser, "return document.getElementById('state').textContent")
        if state.startswith("Aborted"):
            assert await run_js(browser, "return document.querySelectorAll('button').length") == 0
        failed = await until_js(
            browser,
            "return [...document.querySelectorAll('svg.sfc g.step.failed')]"
            ".map(g => g.dataset.step)",
        )
        assert failed == ["TightenBolts"]
        await fits(browser, 1280, 1024)
    assert path.stat().st_size > 10_000


async def test_the_job_page_offers_only_the_actions_its_state_allows(
    station: Station, browser: WebDriver
) -> None:
    async with running(station.gateway(seconds=0.6, **OPERATORS)), station.mes() as mes:
        await station.start_rear_axle(mes, "J1")
        url = f"http://127.0.0.1:{station.port}/ui/scopes/cell1/jobs/J1"
        await anyio.to_thread.run_sync(browser.get, url)
        visible = (
            "return [...document.querySelectorAll('#operator form[data-states]')]"
            ".filter(f => !f.hidden).map(f => f.querySelector('button').value)"
        )
        await until_js(browser, "return document.getElementById('state').textContent === 'Running'")
        assert await run_js(browser, visible) == ["hold", "abort"]
        # The job ends while the page is open: the actions go.
        await until_js(
            browser,
            "return document.getElementById('state').textContent === 'Ended.Completed'",
        )
        assert await run_js(browser, "return document.querySelectorAll('button').length") == 0
        # Results are key/value tables, not JSON text.
        await until_js(browser, "return document.querySelector('#results tr[data-id=tighten]')")
        keys = await run_js(
            browser,
            "return [...document.querySelectorAll('#results tr[data-id=tighten] dl.kv dt')]"
            ".map(td => td.textContent)",
        )
        assert "torque" in keys
        # Served again, an ended job's page has no actions at all.
        await anyio.to_thread.run_sync(browser.get, url)
        await until_js(browser, "return document.getElementById('state').textContent")
        assert await run_js(browser, "return document.querySelectorAll('button, form').length") == 0
        # The scope page reads at both widths too.
        await anyio.to_thread.run_sync(browser.get, url.rsplit("/jobs/", 1)[0])
        await until_js(browser, "return document.querySelector('#jobs tr[data-job=J1]')")
        await fits(browser, 1280, 1024)


async def test_the_timeline_draws_each_command_in_its_lane_with_its_outcome(
    station: Station, browser: WebDriver, tmp_path: Path
) -> None:
    gateway = station.gateway(
        seconds=0.3, GATEWAY_SIMULATOR_FAILURE_RATE="0.5", GATEWAY_SIMULATOR_SEED="2"
    )
    async with running(gateway), station.mes() as mes:
        await station.start_rear_axle(mes, "J1", "J2", "J3")
        api = "/api/scopes/cell1/timeline?minutes=5&fit=1"
        with anyio.fail_after(60):
            while True:
                timeline: dict[str, Any] = await station.get_json(api)
                if (
                    all(
                        job["state"].split(".")[0] in ("Ended", "Aborted")
                        for job in timeline["jobs"]
                    )
                    and len(timeline["jobs"]) == 3
                    and not any(bar["outcome"] == "pending" for bar in timeline["commands"])
                ):
                    break
                await anyio.sleep(0.1)
        await resize(browser, 1280, 800)
        url = f"http://127.0.0.1:{station.port}/ui/scopes/cell1/timeline?minutes=5&fit=1"
        await anyio.to_thread.run_sync(browser.get, url)
        drawn = await run_js(
            browser,
            "return [...document.querySelectorAll('svg.timeline rect.bar.command')].map(r => ["
            "r.dataset.correlation, r.closest('g.lane').dataset.lane, r.dataset.outcome,"
            "r.classList.contains(r.dataset.outcome)])",
        )
        expected = {
            bar["correlation_id"]: (bar["equipment"], bar["outcome"])
            for bar in timeline["commands"]
        }
        assert len(drawn) == len(expected)  # one bar per command
        assert {row[0]: (row[1], row[2]) for row in drawn} == expected
        assert all(row[3] for row in drawn)  # coloured by its outcome
        outcomes = {outcome for _, outcome in expected.values()}
        assert outcomes <= {"ok", "error", "no-reply"}
        job_lanes = await run_js(
            browser,
            "return [...document.querySelectorAll('svg.timeline g.lane.job')]"
            ".map(g => g.dataset.job)",
        )
        assert sorted(job_lanes) == ["J1", "J2", "J3"]
        # A click on a bar shows its action, job and duration.
        await run_js(
            browser,
            "document.querySelector('svg.timeline rect.bar.command').dispatchEvent("
            "new MouseEvent('click', {bubbles: true}))",
        )
        details = await until_js(
            browser, "return document.querySelector('#bar-details dl')?.textContent"
        )
        assert all(fact in details for fact in ("Action", "Job", "Took"))
        stats = await run_js(
            browser, "return [...document.querySelectorAll('#stats tr[data-type]')].length"
        )
        assert stats >= 1
        await fits(browser, 1280, 1024)
        await resize(browser, 1280, 800)
        path = screenshot_path(tmp_path, "ui-timeline.png")
        assert await anyio.to_thread.run_sync(browser.save_screenshot, str(path))
    assert path.stat().st_size > 10_000
