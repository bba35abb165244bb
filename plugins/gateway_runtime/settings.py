"""The ``[runtime]`` settings section: the recipe runtime every format runs on."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import setting


@dataclass(frozen=True)
class RuntimeSettings:
    claim_idle_seconds: float = setting(
        30.0,
        "Work entries unacknowledged this long belong to a dead instance and are claimed",
        minimum=0.1,
    )
    timer_poll_seconds: float = setting(
        0.05, "How often due timers (timeouts, delays, retries) are looked for", minimum=0.005
    )
    scope_poll_seconds: float = setting(
        1.0, "How often scopes started on other instances are looked for", minimum=0.05
    )
    recheck_seconds: float = setting(
        0.25, "How often a transition waiting on elapsed time is evaluated again", minimum=0.01
    )
    reconcile_seconds: float = setting(
        10.0,
        "How often jobs are compared with their executions, to repair hand-offs a crash lost",
        minimum=0.1,
    )
    offline_timeout_seconds: float = setting(
        60.0,
        "An action without a timeout fails this long after its equipment went offline (0: never)",
        minimum=0,
    )
    outbox_grace_seconds: float = setting(
        5.0,
        "A command committed but not confirmed published this long is sent again (its instance "
        "died between the two)",
        minimum=0.1,
    )
    max_concurrent_items: int = setting(32, "Work entries handled at once", minimum=1)
    max_cas_retries: int = setting(
        50, "Tries of a state change that keeps conflicting with other instances", minimum=1
    )
    ended_ttl_seconds: int = setting(
        86400, "How long an ended job's execution state stays for inspection", minimum=1
    )
    # An event may overtake the reply that moves its job to the waiting step by as long as that
    # reply waits in a dead instance's MQTT session before another instance adopts it (~25 s).
    unclaimed_event_seconds: float = setting(
        60.0, "How long an equipment event may wait for the job step that expects it", minimum=0
    )
    unclaimed_events_kept: int = setting(100, "Events kept per scope for late waiters", minimum=1)
    chart_cache_size: int = setting(
        1000,
        "Compiled recipes kept in memory (one per Work Master recipe, shared by its jobs)",
        minimum=1,
    )
    unlimited_scope_jobs_kept: int = setting(
        100,
        "Jobs in progress kept in memory for a scope that runs any number at once "
        "(MaxRunningJobOrders 0; other scopes: twice their capacity); a job ended goes at once",
        minimum=1,
    )
