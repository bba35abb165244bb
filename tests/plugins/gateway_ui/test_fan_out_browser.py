"""The job page of a fan-out in a real browser: each member's runs read as a band of their own
under their action (Debian's chromium, headless; the simulated station with three nutrunners)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.testing import poll_until, running
from gateway_jobs.testing import store_and_start
from gateway_sequence import DATASCHEMA as SEQUENCE
from tests.plugins.gateway_ui.test_fan_out_lanes import (
    NUTRUNNERS,
    RECIPE,
    ended_with_every_command,
)

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROWS = (
    "return [...document.querySelectorAll('#actions tbody tr')].map(row => "
    "[row.dataset.action, row.dataset.member || null, row.className])"
)


async def rows(browser: WebDriver) -> list[list[Any]]:
    """The actions table's rows once it lists every run: [action, member, classes]."""
    found: list[list[Any]] = []

    async def listed() -> bool:
        found[:] = await anyio.to_thread.run_sync(browser.execute_script, ROWS)
        return len(found) >= 9

    await poll_until(listed, timeout=20)
    return found


async def test_the_job_page_groups_a_fan_outs_runs_by_member(
    station: Station, browser: WebDriver
) -> None:
    async with running(station.gateway(seconds=0.05, **NUTRUNNERS)), station.mes() as mes:
        await store_and_start(mes, RECIPE, "J1", dataschema=SEQUENCE)
        await ended_with_every_command(station)
        url = f"http://127.0.0.1:{station.port}/ui/scopes/cell1/jobs/J1"
        await anyio.to_thread.run_sync(browser.get, url)
        shown = await rows(browser)
    assert shown == [
        ["tighten", None, ""],
        ["tighten@nr1", "nr1", "member-first member member-banded"],
        ["tighten@nr2", "nr2", "member-first member member-plain"],
        ["tighten@nr3", "nr3", "member-first member member-banded"],
        ["per_nr", None, ""],
        ["snug@nr2", "nr2", "member-first member member-banded"],
        ["final@nr2", "nr2", "member member-banded"],
        ["snug@nr1", "nr1", "member-first member member-plain"],
        ["final@nr1", "nr1", "member member-plain"],
    ]
