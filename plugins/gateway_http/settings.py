"""The ``[http]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import PORT_MAXIMUM, setting


@dataclass(frozen=True)
class HttpSettings:
    port: int = setting(
        0,
        "Port of /healthz, /readyz, /metrics and the web UI; 0: no HTTP endpoint",
        minimum=0,
        maximum=PORT_MAXIMUM,
    )
    host: str = setting("127.0.0.1", "Address to listen on (0.0.0.0 in a container)")
    max_request_bytes: int = setting(8192, "Longest request head accepted", minimum=256)
    max_connections: int = setting(
        256,
        "Connections served at once; one more is closed at once. Lowered (with a warning) "
        "to stay below the open-file limit with room for the gateway's own connections",
        minimum=8,
    )
    request_head_seconds: float = setting(
        10.0,
        "A connection whose request head is not complete this long after it opened (or after "
        "the previous answer) is closed",
        minimum=0.1,
    )
    idle_seconds: float = setting(
        5.0, "An idle keep-alive connection is closed after this long", minimum=1
    )
    connection_max_seconds: float = setting(
        3600.0,
        "No connection lasts longer (a live event stream ends earlier, ui.stream_max_seconds)",
        minimum=1,
    )
