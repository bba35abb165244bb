"""The ``[sequence]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import setting


@dataclass(frozen=True)
class SequenceSettings:
    timer_poll_seconds: float = setting(
        0.05, "How often due step timeouts (and unconfirmed commands) are looked for", minimum=0.005
    )
    scope_poll_seconds: float = setting(
        1.0,
        "How often the scopes where other instances started sequences are looked for (the "
        "timer poll looks only at the scopes known)",
        minimum=0.05,
    )
    reconcile_seconds: float = setting(
        5.0,
        "How often jobs are compared with their sequences, to repair what a crash interrupted",
        minimum=0.1,
    )
    outbox_grace_seconds: float = setting(
        5.0,
        "A command stored as sent but not confirmed published this long is sent again (its "
        "instance died between the two)",
        minimum=0.1,
    )
    max_cas_retries: int = setting(
        50, "Tries of a state change that keeps conflicting with other instances", minimum=1
    )
    ended_ttl_seconds: int = setting(
        86400, "How long an ended sequence's state stays for inspection", minimum=1
    )
