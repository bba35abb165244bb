"""Surviving the ordinary faults: store and broker outages, timeouts, a stalled process.

Only bad start-up configuration stops a gateway. Once it runs, every long-running loop (the
engine's reads and timers, the publisher, liveness, the instance registry, RPC forwarding, the
transports' message handlers) goes through this module when something fails, so all of them
behave alike:

- **Transient or permanent, by type.** ``is_transient(error)`` says whether a failure may pass by
  itself (the store or the broker unreachable, a timeout, a connection dropped): such work is
  retried and never dropped, and a message that hit one is not acknowledged. Everything else is
  permanent: a message gets its error reply, a work item is logged and dropped. The transient
  types are ``TransientError`` (raise it, or a subclass, for "try again later"), the built-in
  ``ConnectionError`` and ``TimeoutError``, anyio's broken streams and redis-py's connection,
  timeout, loading and read-only errors, a server's "not now" replies (too few replicas, a
  Cluster slot moving, out of memory), and the process running out of files or buffers
  (``EMFILE``: a socket could not be opened, which is no reason to drop a command); a plugin
  adds its own with ``register_transient``. An error whose ``__cause__`` is transient is
  transient too, so wrapping keeps the meaning.
- **Logged once per outage.** ``Outage`` logs the first failure of a run of failures at WARNING
  and the recovery at INFO ("back after 3.2 s"), not every retry. Outages of one check made by
  ``Resilience`` share their log: when many operations (every message in flight, say) hit the
  same outage, the first one logs it and the last one to recover logs its end.
- **Not ready meanwhile.** ``Readiness`` (``gateway.readiness``) holds named checks; a failing
  loop marks its check (``"recipe-runtime.read"``, ``"instances"``...) failing with the reason, and
  ``/readyz`` answers 503 naming it until the loop succeeds again. The HTTP endpoint itself
  never stops.
- **Capped, jittered backoff.** ``Backoff`` doubles from ``gateway.retry_min_seconds`` up to
  ``gateway.retry_max_seconds``, each delay drawn between half and all of the step, so instances
  that lost the same server do not come back in lockstep.

Use ``gateway.resilience`` (a ``Resilience``):

.. code-block:: python

    # a loop that must never die: one step at a time, every ``interval`` seconds
    await gateway.resilience.forever("my-plugin.scan", scan_once, interval=1.0)

    # one operation that must succeed (a transient failure is retried until it does, or until
    # ``stop`` is set, which re-raises it); a permanent failure raises at once
    value = await gateway.resilience.retry("my-plugin.ack", store_it, stop=gateway.stopping)

    # a loop of its own shape: an outage per loop, its pause woken when another loop recovers
    outage = gateway.resilience.outage("my-plugin.read")
    ...
    except Exception as error:
        await outage.pause(outage.failed(error), gateway.stopping)

Both name a readiness check; choose a name per loop (``<plugin>.<loop>``).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import anyio
import redis.exceptions

from gateway.errors import GatewayError
from gateway.peers import SHORTAGE_ERRNOS

log = logging.getLogger(__name__)

T = TypeVar("T")


class TransientError(GatewayError):
    """A failure that may pass by itself (a server away, a timeout): retry, never drop."""


_transient_types: tuple[type[BaseException], ...] = (
    TransientError,
    ConnectionError,  # built-in: refused, reset, broken pipe
    TimeoutError,
    anyio.BrokenResourceError,
    redis.exceptions.ConnectionError,  # includes BusyLoadingError and MaxConnectionsError
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,  # a replica promoted meanwhile
    redis.exceptions.MasterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.OutOfMemoryError,  # at its maxmemory with nothing to evict: keys expire
)


# Replies redis-py has no type for that say "not now": a master with too few replicas
# (min-replicas-to-write), a Cluster slot moving or down, a server at its memory budget with
# nothing it may evict (``maxmemory``: keys expire and free it); also inside a script's error.
_REFUSED_FOR_NOW = re.compile(r"(^|\s)(NOREPLICAS|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|OOM)\b")


def register_transient(*types: type[BaseException]) -> None:
    """Count ``types`` (a client library's connection errors, say) as transient too."""
    global _transient_types
    _transient_types = (*_transient_types, *(t for t in types if t not in _transient_types))


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` may pass by itself, so the work that hit it must be retried.

    An exception group is transient when every exception in it is; an error raised ``from`` a
    transient one is transient.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            return all(is_transient(inner) for inner in current.exceptions)
        if isinstance(current, _transient_types):
            return True
        if isinstance(current, OSError) and current.errno in SHORTAGE_ERRNOS:
            return True  # out of files or buffers (a peer holding many connections): passes
        if isinstance(current, redis.exceptions.ResponseError) and _REFUSED_FOR_NOW.search(
            str(current)
        ):
            return True
        current = current.__cause__
    return False


def describe(error: BaseException) -> str:
    """A short reason for logs and readiness: the type and message of what failed.

    An exception group (a task group's "unhandled errors in a TaskGroup (1 sub-exception)")
    says nothing by itself: it is described by the exceptions in it, so a log line names the
    cause (``ConnectionError: ...``), and how many more there were.
    """
    if not isinstance(error, BaseExceptionGroup):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    reasons = list(dict.fromkeys(describe(leaf) for leaf in _leaves(error)))
    shown = "; ".join(reasons[:3])
    return shown + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of ``group`` and of the groups nested in it, in order."""
    found: list[BaseException] = []
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            found.extend(_leaves(inner))
        else:
            found.append(inner)
    return found


class Backoff:
    """Capped exponential backoff with jitter: ``next()`` is the delay before the next try."""

    def __init__(
        self,
        minimum: float = 0.1,
        maximum: float = 5.0,
        *,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.minimum = max(minimum, 0.001)
        self.maximum = max(maximum, self.minimum)
        self._rng = rng
        self._failures = 0

    def next(self) -> float:
        step = min(self.maximum, self.minimum * float(2 ** min(self._failures, 32)))
        self._failures += 1
        return step / 2 + self._rng() * step / 2

    def reset(self) -> None:
        self._failures = 0


class Readiness:
    """Named readiness checks of one gateway instance; ``/readyz`` reports the failing ones.

    Several holders (loops, tasks) may fail the same check: it passes again once every one of
    them has recovered.
    """

    def __init__(self) -> None:
        self._failing: dict[str, dict[int, str]] = {}

    def fail(self, check: str, reason: str, holder: object = None) -> None:
        self._failing.setdefault(check, {})[id(holder)] = reason

    def recover(self, check: str, holder: object = None) -> None:
        holders = self._failing.get(check)
        if holders is not None:
            holders.pop(id(holder), None)
            if not holders:
                del self._failing[check]

    @property
    def failing(self) -> dict[str, str]:
        """Failing check -> the latest reason (empty when every check passes)."""
        return {check: list(holders.values())[-1] for check, holders in self._failing.items()}

    @property
    def ready(self) -> bool:
        return not self._failing


class OutageLog:
    """What the outages of one check share so the check's outage is logged once: how many of
    them are failing now."""

    def __init__(self) -> None:
        self.failing = 0
        self.since = 0.0  # time.monotonic() when the first of them failed


class Outage:
    """One loop's view of its dependency: logs once per outage, marks the check, backs off.

    ``readiness`` ``None``: the outage is only logged, it fails no readiness check (for work
    that runs only when something calls it, a metrics scrape say, and so might never get the
    chance to pass the check again). ``shared``: the log of every outage of the check.
    """

    def __init__(
        self,
        check: str,
        readiness: Readiness | None,
        backoff: Backoff | None = None,
        *,
        logger: logging.Logger = log,
        shared: OutageLog | None = None,
        on_recovery: Callable[[], None] | None = None,
        waiter: Callable[[float, anyio.Event | None], Awaitable[None]] | None = None,
    ) -> None:
        self.check = check
        self.readiness = readiness
        self.backoff = backoff or Backoff()
        self.logger = logger
        self.shared = shared or OutageLog()
        self.on_recovery = on_recovery  # told when this outage ends (``Resilience`` wakes others)
        self._waiter = waiter  # ``Resilience``'s: a pause that ends when another loop recovers
        self.since: float | None = None  # time.monotonic() of the outage's first failure
        self.failures = 0

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, error: BaseException) -> float:
        """Record a failure; returns how long to wait before trying again."""
        reason = describe(error)
        self.failures += 1
        if not is_transient(error):
            # A bug or bad data, not an outage: always worth its traceback.
            self.logger.error("%s failed: %s", self.check, reason, exc_info=error)
        elif self.since is None and not self.shared.failing:
            self.logger.warning("%s: %s; retrying until it is back", self.check, reason)
        if self.since is None:
            self.since = time.monotonic()
            if not self.shared.failing:
                self.shared.since = self.since
            self.shared.failing += 1
        if self.readiness is not None:
            self.readiness.fail(self.check, reason, self)
        return self.backoff.next()

    async def pause(self, seconds: float, stop: anyio.Event | None = None) -> None:
        """Wait ``seconds`` (the delay ``failed`` returned) before the next try, or less: until
        ``stop`` is set, or (an outage made by ``Resilience``) until another loop of the gateway
        recovers from its outage, the dependency being back for this one too. A loop that
        sleeps out its whole backoff instead keeps ``/readyz`` failing that long after the
        dependency came back."""
        if self._waiter is not None:
            await self._waiter(seconds, stop)
        else:
            await _pause(seconds, stop)

    def succeeded(self) -> None:
        """Record a success; ends the outage (logged once, by the last of the check's outages
        to recover) if there was one."""
        if self.since is not None:
            self.shared.failing -= 1
            if not self.shared.failing:
                self.logger.info(
                    "%s: back after %.1f s (%d failed tries)",
                    self.check,
                    time.monotonic() - self.shared.since,
                    self.failures,
                )
            if self.readiness is not None:
                self.readiness.recover(self.check, self)
            if self.on_recovery is not None:
                self.on_recovery()
        self.since = None
        self.failures = 0
        self.backoff.reset()

    def close(self) -> None:
        """The loop ends: its check no longer fails on its account."""
        if self.since is not None:
            self.shared.failing -= 1
            self.since = None
        if self.readiness is not None:
            self.readiness.recover(self.check, self)


class Resilience:
    """The gateway's retry policy (``gateway.resilience``): readiness and backoff settings."""

    def __init__(
        self, readiness: Readiness, *, minimum_seconds: float = 0.1, maximum_seconds: float = 5.0
    ) -> None:
        self.readiness = readiness
        self.minimum_seconds = minimum_seconds
        self.maximum_seconds = maximum_seconds
        self._logs: dict[str, OutageLog] = {}  # check -> the log its outages share
        # Set when any outage ends: a dependency is back, so every loop still failing tries
        # again at once instead of sleeping out its backoff (and ``/readyz`` with it).
        self._recovery: anyio.Event | None = None

    def outage(self, check: str, *, logger: logging.Logger = log, ready: bool = True) -> Outage:
        """A fresh ``Outage`` for one loop (or one operation) under the readiness ``check``;
        ``ready=False``: logged once per outage like the others, but no readiness check."""
        backoff = Backoff(self.minimum_seconds, self.maximum_seconds)
        shared = self._logs.setdefault(check, OutageLog())
        readiness = self.readiness if ready else None
        return Outage(
            check,
            readiness,
            backoff,
            logger=logger,
            shared=shared,
            on_recovery=self._recovered,
            waiter=self._wait_to_retry,
        )

    def _recovered(self) -> None:
        if self._recovery is not None:
            self._recovery.set()
            self._recovery = None

    async def _wait_to_retry(self, seconds: float, stop: anyio.Event | None = None) -> None:
        """Sleep out a backoff, or less: until another loop recovers from its outage (the
        dependency may be back for this one too) or ``stop`` is set."""
        if self._recovery is None:
            self._recovery = anyio.Event()
        await _pause(seconds, self._recovery, stop)

    async def retry(
        self,
        check: str,
        operation: Callable[[], Awaitable[T]],
        *,
        stop: anyio.Event | None = None,
        logger: logging.Logger = log,
    ) -> T:
        """``await operation()`` until it succeeds; transient failures are retried.

        A permanent failure raises at once. When ``stop`` is set while retrying, the last
        transient error is raised: the instance is stopping and the work stays undone (for a
        message: not acknowledged, so the broker hands it out again).
        """
        # Made at the first failure: most operations succeed at once (every message handled
        # goes through here), and an outage that never failed changes nothing.
        outage: Outage | None = None
        try:
            while True:
                try:
                    result = await operation()
                except Exception as error:
                    if not is_transient(error):
                        raise
                    if outage is None:
                        outage = self.outage(check, logger=logger)
                    delay = outage.failed(error)
                    if stop is not None and stop.is_set():
                        raise
                    await self._wait_to_retry(delay, stop)
                    if stop is not None and stop.is_set():
                        raise
                else:
                    if outage is not None:
                        outage.succeeded()
                    return result
        finally:
            if outage is not None:
                outage.close()

    async def every(
        self,
        check: str,
        seconds: float,
        step: Callable[[], Awaitable[object]],
        *,
        logger: logging.Logger = log,
    ) -> NoReturn:
        """``forever`` with the first run one interval from now (periodic housekeeping)."""
        await anyio.sleep(seconds)
        await self.forever(check, step, interval=seconds, logger=logger)

    async def forever(
        self,
        check: str,
        step: Callable[[], Awaitable[object]],
        *,
        interval: float = 0.0,
        logger: logging.Logger = log,
    ) -> NoReturn:
        """Run ``step`` again and again (``interval`` seconds apart) until cancelled.

        No failure ends the loop: transient ones are logged once per outage, permanent ones
        with their traceback each time; either way the check fails and the next try comes
        after the backoff, not the interval (a check fails until its loop succeeds once, so a
        loop of a 10 s interval would keep ``/readyz`` failing 10 s after its dependency came
        back), and at once when another loop recovers from its outage.
        """
        outage = self.outage(check, logger=logger)
        try:
            while True:
                try:
                    await step()
                except Exception as error:
                    await self._wait_to_retry(outage.failed(error))
                    continue
                outage.succeeded()
                await anyio.sleep(interval)
        finally:
            outage.close()


async def _pause(seconds: float, *wake: anyio.Event | None) -> None:
    """Sleep ``seconds``, or until one of the ``wake`` events is set."""
    events = [event for event in wake if event is not None]
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tasks:
            for event in events:
                tasks.start_soon(_set_then_cancel, event, tasks.cancel_scope)
            if not events:
                await anyio.sleep(seconds)


async def _set_then_cancel(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
