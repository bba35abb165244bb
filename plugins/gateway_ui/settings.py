"""The ``[ui]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import SettingsError
from gateway.settings import Secret, setting


@dataclass(frozen=True)
class UiSettings:
    enabled: bool = setting(True, "Serve the web UI at /ui and its JSON at /api (needs http.port)")
    trace_max_entries: int = setting(
        2000,
        "Stream entries kept in each job's trace (the oldest go first): an entry holds what "
        "happened to the job within one flush (trace_flush_ms), one happening mostly and at "
        "most 10, so a trace keeps at least this many happenings",
        minimum=10,
    )
    trace_flush_ms: int = setting(
        100,
        "How long trace entries gather before they are written to Redis, in ms (the longest a "
        "page waits for one, besides the write): what a job did meanwhile goes as one stream "
        "entry (0: at once, one write per happening when they come slowly)",
        minimum=0,
    )
    trace_kept_seconds: int = setting(
        86400, "How long a job's trace stays after the job is cleared or cancelled", minimum=1
    )
    trace_buffer: int = setting(
        10000,
        "Trace entries held in memory while Redis cannot take them (then the oldest are dropped)",
        minimum=100,
    )
    operators: Secret | None = setting(
        None,
        "Operators allowed to Hold, Resume and Abort jobs from the UI, as 'name:password' "
        "pairs separated by commas (HTTP Basic authentication); empty: no operator actions",
        secret=True,
    )
    viewers: Secret | None = setting(
        None,
        "Who may read the UI and its JSON API, as 'name:password' pairs separated by commas "
        "(HTTP Basic authentication; operators may read too); empty: reading needs no login",
        secret=True,
    )
    trusted_origins: list[str] = setting(
        [],
        "Origins (scheme://host:port) besides the gateway's own whose pages may send operator "
        "actions: the address a reverse proxy serves the UI under",
    )
    max_streams: int = setting(
        100, "Live event streams (open pages) served at once; more get 429", minimum=1
    )
    max_streams_per_client: int = setting(
        10, "Live event streams served at once to one client address; more get 429", minimum=1
    )
    stream_max_seconds: float = setting(
        600.0,
        "A live event stream ends after this long (the browser reconnects and goes on from "
        "where it was), so no visitor holds one for ever",
        minimum=1,
    )

    def operator_passwords(self) -> dict[str, str]:
        """Operator name -> password; empty when operator actions are off."""
        return _passwords(self.operators, "ui.operators")

    def viewer_passwords(self) -> dict[str, str]:
        """Viewer name -> password; empty when reading needs no login."""
        return _passwords(self.viewers, "ui.viewers")


def _passwords(secret: Secret | None, key: str) -> dict[str, str]:
    if secret is None or not secret.reveal().strip():
        return {}
    passwords: dict[str, str] = {}
    for pair in secret.reveal().split(","):
        name, colon, password = pair.strip().partition(":")
        if not colon or not name or not password:
            raise SettingsError(key, "expected name:password pairs, comma separated")
        passwords[name] = password
    return passwords
