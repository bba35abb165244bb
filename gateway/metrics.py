"""Metrics any plugin records, exposed in the Prometheus text format (``/metrics``).

Each gateway owns one ``Metrics`` (``gateway.metrics``) with a registry of its own, so several
gateways in one process (tests, the demo) never mix their figures. Plugins ask for a family by
name; asking twice returns the same one, so plugins can share a family without importing each
other. Figures that are read rather than counted (jobs by state, stream lag) come from samplers:
async functions that set gauges just before a scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest

from gateway.resilience import Outage

log = logging.getLogger(__name__)

PREFIX = "gateway_"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)

Sampler = Callable[[], Awaitable[None]]


class _ChildrenKept:
    """A family whose ``labels(*values)`` finds each child once, then in a dict of its own.

    prometheus_client checks, converts and looks the values up under a lock on every call:
    about 1 us, several times per message and per step. A child dropped from the family
    (``remove``, ``remove_by_labels``, ``clear``) is dropped from the dict too."""

    def labels(self, *labelvalues: Any, **labelkwargs: Any) -> Any:
        if labelkwargs or not labelvalues:
            return super().labels(*labelvalues, **labelkwargs)  # type: ignore[misc]
        kept: dict[tuple[Any, ...], Any] = self.__dict__.setdefault("_kept", {})
        child = kept.get(labelvalues)
        if child is None:
            child = kept[labelvalues] = super().labels(*labelvalues)  # type: ignore[misc]
        return child

    def remove(self, *labelvalues: Any) -> None:
        self.__dict__.pop("_kept", None)
        super().remove(*labelvalues)  # type: ignore[misc]

    def remove_by_labels(self, labels: dict[str, str]) -> None:
        self.__dict__.pop("_kept", None)
        super().remove_by_labels(labels)  # type: ignore[misc]

    def clear(self) -> None:
        self.__dict__.pop("_kept", None)
        super().clear()  # type: ignore[misc]


class Counter(_ChildrenKept, prometheus_client.Counter):
    pass


class Gauge(_ChildrenKept, prometheus_client.Gauge):
    pass


class Histogram(_ChildrenKept, prometheus_client.Histogram):
    pass


Family = TypeVar("Family", Counter, Gauge, Histogram)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._families: dict[str, Any] = {}
        # Each sampler with its outage: a store away fails every scrape, logged once.
        self._samplers: list[tuple[Sampler, Outage]] = []

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return self._family(Counter, name, help, labels)

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        return self._family(Gauge, name, help, labels)

    def histogram(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> Histogram:
        return self._family(Histogram, name, help, labels, buckets=tuple(buckets))

    def _family(
        self, kind: type[Family], name: str, help: str, labels: Sequence[str], **options: Any
    ) -> Family:
        full = name if name.startswith(PREFIX) else PREFIX + name
        existing = self._families.get(full)
        if existing is not None:
            if not isinstance(existing, kind):
                raise TypeError(
                    f"metric {full} is a {type(existing).__name__}, not a {kind.__name__}"
                )
            return existing
        family = kind(full, help, list(labels), registry=self.registry, **options)
        self._families[full] = family
        return family

    def sample_with(self, sampler: Sampler) -> None:
        """Run ``sampler`` before every scrape (it sets gauges from the store, say)."""
        name = getattr(sampler, "__qualname__", repr(sampler))
        self._samplers.append((sampler, Outage(f"metrics sampler {name}", None, logger=log)))

    async def render(self) -> bytes:
        """The Prometheus text exposition, samplers run first (a failing one is counted, and
        logged once per outage; a failure that is no outage, a bug, every time)."""
        failures = self.counter("metric_sampler_failures_total", "Samplers that failed")
        for sampler, outage in self._samplers:
            try:
                await sampler()
            except Exception as error:
                outage.failed(error)
                failures.inc()
            else:
                outage.succeeded()
        text: bytes = generate_latest(self.registry)
        return text
