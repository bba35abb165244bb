"""The link from a line action to its station job (``gateway_command_link``), pure: the
station job's id and scope always, the URL of its page on the station's web UI when
``[line] station_ui_urls`` names it, only http(s), and nothing for another plugin's command."""

from __future__ import annotations

import pytest

from gateway.equipment import CommandLink, EquipmentCommand
from gateway.errors import SettingsError
from gateway.plugins import build_plugin_manager
from gateway.settings import SettingsRegistry, load_settings
from gateway_line import LineSettings
from gateway_line.pages import StationPages
from gateway_ui.pages import job_url


def command(equipment: str | None = "press", job: str = "J 1/a") -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id=f"{job}:press_it:2",
        type="io.github.station-gateway.line.job.v1",
        equipment=equipment,
        scope="line",
        job_order_id=job,
        action="press_it",
    )


def line_settings(**environ: str) -> LineSettings:
    registry = SettingsRegistry()
    registry.register("line", LineSettings)
    variables = {"GATEWAY_LINE_STATIONS": "press=cell1,paint=cell2", **environ}
    return load_settings(registry, environ=variables).get(LineSettings)


def test_a_station_with_a_web_ui_links_to_its_jobs_page_there() -> None:
    pages = StationPages(line_settings(GATEWAY_LINE_STATION_UI_URLS="press=https://gw1:8443/p/"))
    link = pages.gateway_command_link(command())
    station_job = "J 1/a:press_it:2@line"
    # The UI's own job page (its scope and job URL-quoted), under the station's base URL.
    assert link == CommandLink(
        f"{station_job} on scope cell1", "https://gw1:8443/p" + job_url("cell1", station_job)
    )
    assert link.url == "https://gw1:8443/p/ui/scopes/cell1/jobs/J%201%2Fa%3Apress_it%3A2%40line"


def test_a_station_without_a_web_ui_is_named_by_its_job_and_scope() -> None:
    pages = StationPages(line_settings(GATEWAY_LINE_STATION_UI_URLS="press=http://gw1:8080"))
    assert pages.gateway_command_link(command("paint")) == CommandLink(
        "J 1/a:press_it:2@line on scope cell2"
    )


def test_another_plugins_command_gets_no_link_from_the_line() -> None:
    pages = StationPages(line_settings())
    assert pages.gateway_command_link(command("robot")) is None
    assert pages.gateway_command_link(command(None)) is None


def test_the_hook_answers_through_the_plugin_manager_first_result_wins() -> None:
    plugins = build_plugin_manager({})
    plugins.register(StationPages(line_settings()), name="pages")
    link = plugins.hook.gateway_command_link(command=command())
    assert link == CommandLink("J 1/a:press_it:2@line on scope cell1")


@pytest.mark.parametrize(
    ("urls", "complaint"),
    [
        ("press=javascript:alert(1)", "no http:// or https:// URL"),
        ("press=ftp://gw1/", "no http:// or https:// URL"),
        ("press=gw1:8080", "no http:// or https:// URL"),
        ("drill=http://gw1:8080", "drill is no station"),
    ],
)
def test_station_ui_urls_are_http_urls_of_known_stations(urls: str, complaint: str) -> None:
    with pytest.raises(SettingsError, match=complaint):
        line_settings(GATEWAY_LINE_STATION_UI_URLS=urls)


@pytest.mark.parametrize("url", ["javascript:alert(1)", "data:text/html,x", "//gw1/x", "http://"])
def test_a_command_link_is_never_other_than_http(url: str) -> None:
    with pytest.raises(ValueError, match="no http:// or https:// URL"):
        CommandLink("x", url)
