"""Job management's figures on ``/metrics``: method calls by status, jobs by state and scope."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.jobstates import TopState
from gateway.metrics import Metrics
from gateway_jobs.repository import JobRepository

if TYPE_CHECKING:
    from gateway_jobs.jobs import JobManager

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


def sample_queues(metrics: Metrics, manager: JobManager) -> None:
    """Each scope's queue at every scrape: waiting and admitted jobs, capacity, online state,
    and each waiting job's position (1 starts next; a queue is short, so labels stay few)."""
    waiting = metrics.gauge("job_queue_waiting", "Jobs waiting in the scope's queue", ["scope"])
    running = metrics.gauge(
        "job_queue_admitted", "Jobs let start and not ended (holding a slot)", ["scope"]
    )
    capacity = metrics.gauge(
        "job_queue_capacity", "Jobs the scope runs at once (0: no limit)", ["scope"]
    )
    online = metrics.gauge("scope_online", "1 while queued jobs may start, 0 offline", ["scope"])
    position = metrics.gauge(
        "job_queue_position", "A waiting job's place in its queue (1: next)", ["scope", "job"]
    )

    async def sample() -> None:
        position.clear()  # jobs that left the queue must not linger
        for scope in await manager.repository.store.known_scopes():
            view = await manager.dispatcher.queue(scope)
            waiting.labels(scope).set(len(view.waiting))
            running.labels(scope).set(len(view.admitted))
            capacity.labels(scope).set(view.capacity)
            online.labels(scope).set(1 if view.online else 0)
            for entry in view.waiting:
                position.labels(scope, entry.job_order_id).set(entry.position)

    metrics.sample_with(sample)
