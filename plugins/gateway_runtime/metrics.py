"""The SFC engine's figures on ``/metrics``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.metrics import DURATION_BUCKETS, Metrics


class EngineMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.commands = metrics.counter(
            "equipment_commands_total", "Commands sent to equipment, by type", ["type"]
        )
        self.replies = metrics.histogram(
            "equipment_reply_seconds",
            "From sending a command to the equipment's reply, by outcome",
            ["outcome"],
        )
        self.steps = metrics.histogram(
            "recipe_step_seconds", "How long recipe steps were active", ["step"], DURATION_BUCKETS
        )
        self.charts = metrics.counter(
            "recipe_charts_ended_total", "Recipe charts that ended, by outcome", ["outcome"]
        )
        self.events_dropped = metrics.counter(
            "equipment_events_dropped_total",
            "Equipment events no job took, by reason: not_held (no job holds the equipment and "
            "none waited), job_ended (kept for a job that ended), no_job (no scope runs a job "
            "waiting for it)",
            ["reason"],
        )
        self.pending = metrics.gauge(
            "work_stream_pending", "Work entries handed out but not acknowledged", ["scope"]
        )
        self.lag = metrics.gauge("work_stream_lag", "Work entries not handed out yet", ["scope"])

    def sample_streams(
        self, metrics: Metrics, groups: Callable[[], Awaitable[dict[str, dict[str, Any]]]]
    ) -> None:
        """Read the work streams' consumer group at every scrape (``groups``: scope -> info)."""

        async def sample() -> None:
            for scope, info in (await groups()).items():
                self.pending.labels(scope).set(int(info.get("pending") or 0))
                self.lag.labels(scope).set(int(info.get("lag") or 0))

        metrics.sample_with(sample)
