"""The host's own settings section, ``[gateway]``, registered like any plugin's."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.hookspecs import hookimpl
from gateway.settings import setting


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "station-gateway"


# The role of an instance that runs everything (the default).
ALL_ROLES = "all"


@dataclass(frozen=True)
class CoreSettings:
    instance_id: str = setting(
        "",
        "Unique, stable name of this instance (MQTT client id, consumer name); "
        "empty: the host name",
    )
    source: str = setting(
        "", "CloudEvent source of the events this instance sends; empty: urn:station-gateway:<id>"
    )
    role: str = setting(
        ALL_ROLES, "Services to run: 'all', or one role such as 'gateway' or 'publisher'"
    )
    data_dir: Path = setting(default_data_dir(), "Where embedded services keep their data")
    log_level: str = setting(
        "INFO", "Log level", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    )
    log_format: str = setting("text", "Log line format", choices=("text", "json"))
    shutdown_grace_seconds: float = setting(
        10.0, "How long in-flight work may take to finish on shutdown", minimum=0
    )
    event_loop: str = setting(
        "uvloop",
        "Event loop of `gateway run`: uvloop (libuv, less CPU per message on a busy station) or "
        "asyncio (the standard library's); uvloop falls back to asyncio where it is not "
        "installed",
        choices=("uvloop", "asyncio"),
    )
    retry_min_seconds: float = setting(
        0.1,
        "First delay before retrying after the store or the broker failed (doubles per try)",
        minimum=0.001,
    )
    retry_max_seconds: float = setting(
        5.0, "Longest delay between retries while the store or the broker is away", minimum=0.001
    )

    @property
    def effective_instance_id(self) -> str:
        return self.instance_id or socket.gethostname()

    @property
    def effective_source(self) -> str:
        return self.source or f"urn:station-gateway:{self.effective_instance_id}"


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("gateway", CoreSettings)
