"""The line's job page links a delegated action to the station job it runs: two gateways (the
line and its stations, ``tests/plugins/gateway_line/harness.py``), each with its web UI, the
browser on the line's job page while the press's job runs, then on the page the link opens.
The paint shop's gateway has no web UI configured: its action names the job and scope only."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import anyio
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.testing import running
from gateway.testing.services import free_port
from gateway_jobs.testing import final_response, state_texts
from tests.plugins.gateway_line.harness import Line, configure, held_work, press_job, start_line_job
from tests.plugins.gateway_ui.conftest import get_json
from tests.plugins.gateway_ui.test_browser import run_js, until_js

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

DELEGATED = """
const cell = document.querySelector('#actions tr[data-action="' + arguments[0] + '"] td.delegated');
const link = cell && cell.querySelector('a');
if (!cell || !cell.textContent) return null;
return {text: cell.textContent, href: link && link.href, rel: link && link.rel,
        target: link && link.target};
"""


def action(view: dict[str, Any], name: str) -> dict[str, Any]:
    return next(found for found in view["progress"]["actions"] if found["name"] == name)


async def test_a_running_line_action_links_to_its_station_job_page(
    mqtt_url: str, redis_url: str, unique: str, browser: WebDriver
) -> None:
    line = Line(mqtt_url, redis_url, unique)
    station_port, line_port = free_port(), free_port()
    release = held_work(line)  # the press's job runs until the test has followed the link
    stations = line.stations(GATEWAY_HTTP_PORT=str(station_port))
    line_gateway = line.line(
        GATEWAY_HTTP_PORT=str(line_port),
        GATEWAY_LINE_STATION_UI_URLS=f"press=http://127.0.0.1:{station_port}",
    )
    async with running(stations), running(line_gateway), line.mes() as (mes, press, paint):
        await configure(mes, press, paint)
        await start_line_job(mes)
        station_job = await press_job(line)
        quoted = quote(station_job, safe="")
        expected = f"http://127.0.0.1:{station_port}/ui/scopes/cell1/jobs/{quoted}"
        view = await get_json(line_port, "/api/scopes/line/jobs/J1")
        assert action(view, "press_it")["link"] == {
            "label": f"{station_job} on scope cell1",
            "url": expected,
        }

        page = f"http://127.0.0.1:{line_port}/ui/scopes/line/jobs/J1"
        await anyio.to_thread.run_sync(browser.get, page)
        shown = await until_js(browser, DELEGATED.replace("arguments[0]", "'press_it'"))
        assert shown == {
            "text": f"{station_job} on scope cell1",
            "href": expected,
            "rel": "noopener noreferrer",  # the station's page gets no hold on this one
            "target": "_blank",
        }
        # The link is live while the station's job runs: the station's own job page.
        await anyio.to_thread.run_sync(browser.get, expected)
        heading = await until_js(browser, "return document.querySelector('h1')?.textContent")
        assert heading == f"Job {station_job}"
        state = await run_js(browser, "return document.getElementById('state').textContent")
        assert state.startswith("Running")

        release.set()
        response = await final_response(mes)
        assert state_texts(response)[:2] == ["Ended", "Completed"]
        view = await get_json(line_port, "/api/scopes/line/jobs/J1")
        painted = action(view, "paint_it")
        assert painted["link"] == {
            "label": f"{painted['result']['JobOrderID']} on scope cell2",
            "url": None,  # no web UI configured for the paint shop: its job and scope, as text
        }
        await anyio.to_thread.run_sync(browser.get, page)
        shown = await until_js(browser, DELEGATED.replace("arguments[0]", "'paint_it'"))
        assert shown["text"] == painted["link"]["label"]
        assert shown["href"] is None
