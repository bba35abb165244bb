"""Job management's figures on ``/metrics``: method calls by status, jobs by state and scope."""

from __future__ import annotations

from collections.abc import Callable

from gateway.jobstates import TopState
from gateway.metrics import Metrics
from gateway_jobs.repository import JobRepository

# Jobs are only ever counted in these; InitialState and EndState hold none (a cleared job is gone).
COUNTED_STATES = [state for state in TopState if state not in (TopState.INITIAL, TopState.END)]


def count_methods(metrics: Metrics) -> Callable[[str, str], None]:
    """A function counting one method call (or configuration event) and its ReturnStatus."""
    calls = metrics.counter(
        "job_methods_total",
        "MES method calls and configuration events, by status",
        ["method", "status"],
    )
    return lambda method, status: calls.labels(method, status).inc()


def sample_jobs_by_state(metrics: Metrics, repository: JobRepository) -> None:
    """Jobs by scope and state, read from the store's state indexes at every scrape.

    Read, not counted: every instance changes jobs, and only the store knows the total.
    """
    gauge = metrics.gauge("jobs", "Job orders by scope and top-level state", ["scope", "state"])

    async def sample() -> None:
        for scope in await repository.store.known_scopes():
            for state in COUNTED_STATES:
                count = await repository.store.client.scard(repository.state_key(scope, state))
                gauge.labels(scope, state.value).set(count)

    metrics.sample_with(sample)
