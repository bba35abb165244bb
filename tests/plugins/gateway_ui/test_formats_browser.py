"""The job page of a sequence in a real browser: every format's drawing is lit live.

The web UI lights a drawing's ``g.step`` whose ``data-step`` names an active node, whatever the
format drew it (docs/recipe-formats.md). A sequence on the simulated station: the page, opened
once, lights its first block, then its ``par`` block's two steps, without a reload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.testing import running
from gateway_jobs.testing import store_and_start
from gateway_sequence.model import DATASCHEMA

if TYPE_CHECKING:
    from tests.plugins.gateway_ui.conftest import Station

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

AXLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "sequences" / "axle.json").read_text()
)
LIT = "return [...document.querySelectorAll('#chart g.step.active')].map(g => g.dataset.action)"


async def run_js(browser: WebDriver, script: str) -> Any:
    return await anyio.to_thread.run_sync(lambda: browser.execute_script(script))


async def until_lit(browser: WebDriver, steps: set[str]) -> None:
    with anyio.fail_after(30):
        while set(await run_js(browser, LIT)) != steps:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def test_the_page_of_a_sequence_lights_its_blocks_as_they_run(
    station: Station, browser: WebDriver
) -> None:
    async with running(station.gateway(seconds=1.5)), station.mes() as mes:
        await store_and_start(mes, AXLE, "S1", dataschema=DATASCHEMA)
        url = f"http://127.0.0.1:{station.port}/ui/scopes/cell1/jobs/S1"
        await anyio.to_thread.run_sync(browser.get, url)
        await run_js(browser, "window.loadedOnce = true")
        assert (
            await run_js(browser, "return document.querySelectorAll('#chart g.step').length") == 4
        )
        await until_lit(browser, {"tighten", "inspect"})  # the par block, lit as one
        await until_lit(browser, {"home"})
        assert await run_js(browser, "return window.loadedOnce === true")  # never reloaded
