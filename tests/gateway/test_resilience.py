"""The host's fault handling: transient vs permanent, once-per-outage logging, readiness,
capped jittered backoff, and the retry / forever helpers every long-running loop uses."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import pytest
import redis.exceptions

from gateway.errors import GatewayError, ValidationError
from gateway.resilience import (
    Backoff,
    Readiness,
    Resilience,
    TransientError,
    describe,
    is_transient,
    register_transient,
)
from gateway.testing import wait_until


class LibraryHiccup(Exception):
    """Stands for a client library's own connection error type."""


def test_transient_and_permanent_are_told_apart_by_type() -> None:
    assert is_transient(redis.exceptions.OutOfMemoryError("command not allowed when used memory"))
    assert is_transient(TransientError("store away"))
    assert is_transient(redis.exceptions.ConnectionError("Connection refused"))
    assert is_transient(redis.exceptions.BusyLoadingError("loading"))
    assert is_transient(redis.exceptions.MaxConnectionsError("too many"))
    assert is_transient(redis.exceptions.TimeoutError("read timeout"))
    assert is_transient(TimeoutError())
    assert is_transient(ConnectionResetError())
    assert not is_transient(ValueError("bad field"))
    assert not is_transient(ValidationError("data", "not a mapping"))
    assert not is_transient(redis.exceptions.ResponseError("WRONGTYPE"))
    assert not is_transient(GatewayError("no driver serves it"))


def test_wrapping_keeps_the_meaning_and_groups_need_all_members_transient() -> None:
    wrapped = GatewayError("not delivered")
    wrapped.__cause__ = redis.exceptions.ConnectionError("gone")  # as ``raise ... from`` sets it
    assert is_transient(wrapped)
    assert is_transient(ExceptionGroup("two", [TimeoutError(), TransientError("x")]))
    assert not is_transient(ExceptionGroup("mixed", [TimeoutError(), ValueError("x")]))


def test_a_plugin_registers_its_own_transient_types() -> None:
    assert not is_transient(LibraryHiccup())
    register_transient(LibraryHiccup)
    assert is_transient(LibraryHiccup())


def test_backoff_doubles_up_to_its_cap_with_jitter_and_starts_over_after_reset() -> None:
    highest = Backoff(0.1, 1.0, rng=lambda: 1.0)
    assert [round(highest.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    lowest = Backoff(0.1, 1.0, rng=lambda: 0.0)
    assert [round(lowest.next(), 3) for _ in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    highest.reset()
    assert round(highest.next(), 3) == 0.1


def test_an_outage_is_logged_once_and_its_check_fails_until_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    readiness = Readiness()
    outage = Resilience(readiness).outage("recipe-runtime.read")
    caplog.set_level(logging.INFO, logger="gateway.resilience")
    for _ in range(5):
        outage.failed(redis.exceptions.ConnectionError("Connection refused"))
    assert not readiness.ready
    assert readiness.failing == {"recipe-runtime.read": "ConnectionError: Connection refused"}
    outage.succeeded()
    assert readiness.failing == {}
    outage.succeeded()  # no outage: nothing more to say
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("recipe-runtime.read: ConnectionError: Connection refused; retrying")
    assert "recipe-runtime.read: back after" in lines[1]
    assert "(5 failed tries)" in lines[1]


def test_a_check_failed_by_two_holders_passes_when_both_recovered() -> None:
    readiness = Readiness()
    resilience = Resilience(readiness)
    first, second = resilience.outage("mqtt.handlers"), resilience.outage("mqtt.handlers")
    first.failed(TimeoutError())
    second.failed(TimeoutError())
    first.succeeded()
    assert "mqtt.handlers" in readiness.failing
    second.succeeded()
    assert readiness.ready


def test_many_operations_hit_by_one_outage_log_it_once_and_its_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    resilience = Resilience(Readiness())
    caplog.set_level(logging.INFO, logger="gateway.resilience")
    handlers = [resilience.outage("mqtt.handlers") for _ in range(20)]  # messages in flight
    for outage in handlers:
        outage.failed(redis.exceptions.ConnectionError("Connection refused"))
    for outage in handlers[:-1]:
        outage.succeeded()
    handlers[-1].close()  # the last one ended with its instance stopping
    assert [record.getMessage() for record in caplog.records] == [
        "mqtt.handlers: ConnectionError: Connection refused; retrying until it is back"
    ]
    caplog.clear()
    # The next outage is logged again, and its end by the last operation to get through.
    for outage in handlers[:2]:
        outage.failed(TimeoutError())
    handlers[0].succeeded()
    assert len(caplog.records) == 1
    handlers[1].succeeded()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert lines[1].startswith("mqtt.handlers: back after"), lines
    assert resilience.readiness.ready


def test_an_outage_without_readiness_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    readiness = Readiness()
    outage = Resilience(readiness).outage("metrics", ready=False)
    caplog.set_level(logging.INFO, logger="gateway.resilience")
    outage.failed(TimeoutError())
    outage.failed(TimeoutError())
    assert readiness.ready
    outage.succeeded()
    assert len(caplog.records) == 2


@pytest.mark.anyio
async def test_retry_waits_out_transient_failures_and_raises_permanent_ones() -> None:
    readiness = Readiness()
    resilience = Resilience(readiness, minimum_seconds=0.001, maximum_seconds=0.01)
    calls = 0
    seen_failing: list[dict[str, str]] = []

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        seen_failing.append(readiness.failing)
        if calls < 4:
            raise redis.exceptions.ConnectionError("Connection refused")
        return "stored"

    assert await resilience.retry("jobs.store", flaky) == "stored"
    assert calls == 4
    assert seen_failing[-1] == {"jobs.store": "ConnectionError: Connection refused"}
    assert readiness.ready

    async def broken() -> None:
        raise ValueError("bad document")

    with pytest.raises(ValueError, match="bad document"):
        await resilience.retry("jobs.store", broken)
    assert readiness.ready


@pytest.mark.anyio
async def test_retry_gives_up_with_the_transient_error_once_the_instance_stops() -> None:
    resilience = Resilience(Readiness(), minimum_seconds=0.001, maximum_seconds=0.01)
    stop = anyio.Event()
    calls = 0

    async def never() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            stop.set()
        raise TransientError("store away")

    with anyio.fail_after(5), pytest.raises(TransientError):
        await resilience.retry("mqtt.handlers", never, stop=stop)
    assert calls == 3
    assert resilience.readiness.ready  # a retry that ended fails no check any more


@pytest.mark.anyio
async def test_forever_survives_every_failure_and_reports_readiness() -> None:
    readiness = Readiness()
    resilience = Resilience(readiness, minimum_seconds=0.001, maximum_seconds=0.01)
    outcomes: list[BaseException | None] = [
        redis.exceptions.ConnectionError("down"),
        ValueError("a bug"),
        None,
        None,
    ]
    done = anyio.Event()
    failing_seen: list[bool] = []

    async def step() -> None:
        failing_seen.append(not readiness.ready)
        if not outcomes:
            done.set()
            return
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: resilience.forever("scan", step, interval=0.001))
            await done.wait()
            tasks.cancel_scope.cancel()
    assert failing_seen[:4] == [False, True, True, False]
    assert readiness.ready


@pytest.mark.parametrize(
    "message",
    [
        "NOREPLICAS Not enough good replicas to write.",
        "CLUSTERDOWN The cluster is down",
        "Error running script (call to f_1): @user_script:3: NOREPLICAS Not enough good replicas",
        "OOM command not allowed when used memory > 'maxmemory'.",
    ],
)
def test_a_master_refusing_for_now_is_transient(message: str) -> None:
    """min-replicas-to-write and Cluster slot trouble pass by themselves: retried."""
    assert is_transient(redis.exceptions.ResponseError(message))
    assert not is_transient(redis.exceptions.ResponseError("WRONGTYPE Operation against a key"))


def test_an_exception_group_is_described_by_the_exceptions_in_it() -> None:
    """A task group's failure names its cause, not "unhandled errors in a TaskGroup"."""
    refused = ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    group = ExceptionGroup("unhandled errors in a TaskGroup", [refused])
    assert describe(group) == (
        "ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused."
    )
    nested = BaseExceptionGroup("outer", [group, ExceptionGroup("inner", [TimeoutError()])])
    assert describe(nested) == (
        "ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.; TimeoutError"
    )
    many = ExceptionGroup("many", [ValueError(str(n)) for n in range(5)])
    assert describe(many) == "ValueError: 0; ValueError: 1; ValueError: 2 (and 2 more)"


@pytest.mark.anyio
async def test_a_retry_logs_the_cause_inside_an_exception_group(
    caplog: pytest.LogCaptureFixture,
) -> None:
    resilience = Resilience(Readiness(), minimum_seconds=0.001, maximum_seconds=0.001)
    failures = [ExceptionGroup("unhandled errors in a TaskGroup", [ConnectionError("refused")])]

    async def publish() -> None:
        if failures:
            raise failures.pop()

    with caplog.at_level(logging.WARNING), anyio.fail_after(5):
        await resilience.retry("publisher", publish)
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line == "publisher: ConnectionError: refused; retrying until it is back"


@pytest.mark.anyio
async def test_a_failed_loop_of_a_long_interval_retries_at_its_backoff() -> None:
    """Its check passes again once the loop has succeeded, so the next try may not wait for
    the loop's interval (an hour here) once the dependency is back."""
    readiness = Readiness()
    resilience = Resilience(readiness, minimum_seconds=0.001, maximum_seconds=0.01)
    outcomes: list[Exception | None] = [ConnectionError("down"), None]
    succeeded = anyio.Event()

    async def step() -> None:
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        succeeded.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: resilience.forever("hourly", step, interval=3600))
            await succeeded.wait()
            assert readiness.ready
            tasks.cancel_scope.cancel()


@pytest.mark.anyio
async def test_when_one_loop_recovers_every_failing_loop_tries_again_at_once() -> None:
    """Backoffs of a minute: the loops that failed during the outage do not wait them out
    once another loop found the dependency back, and ``/readyz`` turns ready with them."""
    readiness = Readiness()
    resilience = Resilience(readiness, minimum_seconds=60, maximum_seconds=120)
    up = False
    tries = {"engine": 0, "publisher": 0}

    def loop(name: str) -> Callable[[], Awaitable[None]]:
        async def step() -> None:
            tries[name] += 1
            if not up:
                raise ConnectionError("down")

        return step

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            for name in tries:
                tasks.start_soon(partial(resilience.forever, name, loop(name), interval=3600))
            await wait_until(lambda: set(readiness.failing) == set(tries))
            up = True
            probe = resilience.outage("probe")  # a third loop that failed and succeeds now
            probe.failed(ConnectionError("down"))
            probe.succeeded()
            await wait_until(lambda: readiness.ready)
            tasks.cancel_scope.cancel()
    assert tries == {"engine": 2, "publisher": 2}


@pytest.mark.anyio
async def test_a_loop_of_its_own_shape_pauses_until_another_loop_recovers() -> None:
    """A loop that paces its own retries (``outage.pause``) with a minute's backoff tries
    again as soon as another loop found the dependency back, and ``/readyz`` turns ready."""
    readiness = Readiness()
    resilience = Resilience(readiness, minimum_seconds=60, maximum_seconds=120)
    up = False
    tries = 0

    async def own_loop() -> None:
        nonlocal tries
        outage = resilience.outage("own")
        while True:
            tries += 1
            if up:
                outage.succeeded()
                return
            await outage.pause(outage.failed(ConnectionError("down")))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(own_loop)
            await wait_until(lambda: "own" in readiness.failing)
            up = True
            probe = resilience.outage("probe")
            probe.failed(ConnectionError("down"))
            probe.succeeded()
            await wait_until(lambda: readiness.ready)
    assert tries == 2


@pytest.mark.anyio
async def test_an_outage_pause_ends_when_the_instance_stops() -> None:
    outage = Resilience(Readiness()).outage("own")
    stopping = anyio.Event()
    stopping.set()
    with anyio.fail_after(5):
        await outage.pause(3600, stopping)
