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
