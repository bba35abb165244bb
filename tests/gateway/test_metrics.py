"""Metrics: samplers run before every scrape; a store away is logged once per outage."""

from __future__ import annotations

import logging

import pytest
import redis.exceptions

from gateway.metrics import Metrics

pytestmark = pytest.mark.anyio


async def test_a_sampler_failing_scrape_after_scrape_is_logged_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    jobs = metrics.gauge("jobs", "Jobs")
    store_up = False

    async def sample_jobs() -> None:
        if not store_up:
            raise redis.exceptions.ConnectionError("Connection refused")
        jobs.set(3)

    metrics.sample_with(sample_jobs)
    caplog.set_level(logging.INFO, logger="gateway.metrics")
    for _ in range(5):  # scrapes during the outage: each still answers
        assert b"gateway_metric_sampler_failures_total" in await metrics.render()
    store_up = True
    text = (await metrics.render()).decode()
    await metrics.render()
    assert "gateway_jobs 3.0" in text
    assert "gateway_metric_sampler_failures_total 5.0" in text
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert "sample_jobs: ConnectionError: Connection refused; retrying" in lines[0]
    assert "sample_jobs: back after" in lines[1]


async def test_a_sampler_with_a_bug_is_logged_every_time(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()

    async def broken() -> None:
        raise KeyError("state")

    metrics.sample_with(broken)
    await metrics.render()
    await metrics.render()
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 2
    assert errors[0].exc_info is not None


async def test_a_labelled_child_kept_between_calls_still_counts_and_clearing_drops_it() -> None:
    metrics = Metrics()
    counter = metrics.counter("things_total", "Things, by kind", ["kind"])
    counter.labels("a").inc()
    counter.labels("a").inc(2)
    counter.labels(kind="a").inc()  # by name: prometheus_client's own lookup, the same child
    histogram = metrics.histogram("thing_seconds", "How long", ["kind"])
    histogram.labels("a").observe(0.002)
    histogram.labels("a").observe(0.003)
    text = (await metrics.render()).decode()
    assert 'gateway_things_total{kind="a"} 4.0' in text
    assert 'gateway_thing_seconds_count{kind="a"} 2.0' in text

    counter.clear()  # a child asked for again after this is a new one, and is exported
    counter.labels("a").inc()
    counter.remove("a")
    counter.labels("a").inc(5)
    assert 'gateway_things_total{kind="a"} 5.0' in (await metrics.render()).decode()
