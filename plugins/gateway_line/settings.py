"""The ``[line]`` settings section: the downstream stations this gateway delegates jobs to."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.equipment import check_link_url
from gateway.settings import Secret, setting
from gateway.topics import JOBS_PREFIX, MES_REPLY_PREFIX, check_topic_level, check_topic_prefix

LINE_REPLY_PREFIX = f"{MES_REPLY_PREFIX}/line"  # under the MES's replies: the MES's broker user


@dataclass(frozen=True)
class Station:
    """A downstream station as recipes name it (``equipment``) and the scope its jobs run in."""

    equipment: str
    scope: str


def parse_station(text: str) -> Station:
    """``press=cell2`` -> Station("press", "cell2"); ``press`` alone: scope ``press``."""
    equipment, _, scope = text.partition("=")
    equipment, scope = equipment.strip(), scope.strip() or equipment.strip()
    return Station(
        check_topic_level("stations: equipment", equipment), check_topic_level("stations", scope)
    )


@dataclass(frozen=True)
class LineSettings:
    stations: list[str] = setting(
        [],
        "Downstream stations as <equipment>=<scope> (<equipment> alone: the scope of that name): "
        "a push_command action naming <equipment> runs a job on that station's gateway; "
        "empty: the plugin is off",
    )
    url: str = setting(
        "",
        "Broker of the downstream gateways (mqtt://, mqtts://, memory://); empty: [mqtt] url",
        schemes=("mqtt", "mqtts", "memory"),
    )
    username: str = setting("", "Broker user on that broker (the stations' MES user)")
    password: Secret | None = setting(None, "Broker password", secret=True)
    topic_prefix: str = setting(
        JOBS_PREFIX, "[jobs] topic_prefix of the downstream gateways: <prefix>/<scope>/commands"
    )
    reply_prefix: str = setting(
        LINE_REPLY_PREFIX,
        "The downstream gateways answer on <prefix>/<client id> (under the MES's replies, so "
        "the MES's broker user may read them)",
    )
    request_timeout_seconds: float = setting(
        10.0,
        "How long a StoreAndStart (or Pause, Abort...) waits for the station's answer",
        minimum=0.1,
    )
    reconcile_seconds: float = setting(
        10.0,
        "How often the line checks that no station job outlives its line job (an Abort or Stop "
        "lost to a crash is passed on then)",
        minimum=0.05,
    )
    station_ui_urls: list[str] = setting(
        [],
        "Web UIs of the stations' gateways as <equipment>=<base URL> (http:// or https://, "
        "press=http://cell1-gw:8080): the line's job page links a delegated action to the "
        "station's job page there; a station without one shows the station job's id and scope",
    )
    reconnect_max_seconds: float = setting(
        10.0, "Longest wait between attempts to reach the broker (exponential backoff)", minimum=0.1
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        check_topic_prefix("topic_prefix", self.topic_prefix)
        check_topic_prefix("reply_prefix", self.reply_prefix)
        equipment = [station.equipment for station in self.line()]
        twice = sorted({name for name in equipment if equipment.count(name) > 1})
        if twice:
            raise ValueError(f"stations: {', '.join(twice)} named twice")
        unknown = sorted(set(self.ui_urls()) - set(equipment))
        if unknown:
            raise ValueError(f"station_ui_urls: {', '.join(unknown)} is no station")

    def line(self) -> list[Station]:
        """The stations, parsed."""
        return [parse_station(text) for text in self.stations]

    def ui_urls(self) -> dict[str, str]:
        """The stations' web UI base URLs by equipment, parsed (``ValueError``: not http(s))."""
        return dict(parse_ui_url(text) for text in self.station_ui_urls)


def parse_ui_url(text: str) -> tuple[str, str]:
    """``press=http://cell1-gw:8080/`` -> ("press", "http://cell1-gw:8080")."""
    equipment, _, url = text.partition("=")
    try:
        check_link_url(url.strip())
    except ValueError as error:
        raise ValueError(f"station_ui_urls: {equipment.strip()}: {error}") from None
    return equipment.strip(), url.strip().rstrip("/")
