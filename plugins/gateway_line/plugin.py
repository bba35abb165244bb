"""Hook implementations of the line plugin (registered as ``line``): off until ``[line]
stations`` names a station.

- settings section ``[line]``;
- the ``LineDriver`` serving the stations (a station is equipment whose commands are jobs);
- the ``LineFollower`` service, and its ``StationLink`` as an observer of upstream job states;
- ``StationPages``: the link from a line action to its station job (``gateway_command_link``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from gateway.equipment import EquipmentDriver
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.transport import Service
from gateway_line.driver import LineDriver
from gateway_line.follower import LineFollower
from gateway_line.link import StationLink
from gateway_line.pages import StationPages
from gateway_line.settings import LineSettings
from gateway_mqtt import MqttSettings

if TYPE_CHECKING:
    from gateway.phases import DriverPhase, ServicePhase

log = logging.getLogger(__name__)


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("line", LineSettings)


@hookimpl
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
) -> None:
    config = settings.get(LineSettings)
    if not config.stations:
        log.debug("line off: line.stations is empty")
        return
    link = gateway.state.add(StationLink(config, gateway.source))
    if gateway.runs(LineFollower.roles):  # elsewhere no follower passes the changes on
        gateway.plugins.register(link, name=f"line-{uuid.uuid4().hex}")  # this gateway's observer
    # Everywhere: instances of every role check that a Work Master's actions are routable,
    # and any may serve the web UI, whose job page links an action to its station job.
    register(LineDriver(link))
    gateway.plugins.register(StationPages(config), name=f"line-pages-{uuid.uuid4().hex}")


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    link = gateway.state.find(StationLink)
    if link is not None:
        url = broker_url(link.settings, settings.find(MqttSettings))
        register(LineFollower(link, url, f"{gateway.instance_id}-line"))


def broker_url(line: LineSettings, mqtt: MqttSettings | None) -> str:
    """The stations' broker with the line's credentials: ``line.url``, else the gateway's own
    (``[mqtt] url``, and its credentials unless the line has its own)."""
    url, username, password = line.url, line.username, line.password
    if not url and mqtt is not None:
        url = mqtt.url
        if not username:
            username, password = mqtt.username, mqtt.password
    url = url or "mqtt://localhost:1883"
    if not username:
        return url
    parts = urlsplit(url)
    userinfo = quote(username, safe="")
    if password is not None:
        userinfo += ":" + quote(password.reveal(), safe="")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))
