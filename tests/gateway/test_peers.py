"""gateway.peers: connection caps under the open-file limit, resource shortages as transient
failures, repeated complaints logged once per interval, slower answers to repeated bad logins."""

from __future__ import annotations

import errno
import logging
import resource

import pytest

from gateway.peers import (
    RESERVED_FILES,
    LoginThrottle,
    LogOnce,
    connection_cap,
    is_resource_shortage,
    open_files_limit,
)
from gateway.resilience import is_transient


def test_a_cap_above_the_room_under_the_file_limit_is_lowered_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    room = (open_files_limit() - RESERVED_FILES) // 2
    assert connection_cap("x.max_connections", 8) == min(8, room)
    with caplog.at_level(logging.WARNING):
        assert connection_cap("x.max_connections", room + 1000) == room
    assert "x.max_connections" in caplog.text
    assert "ulimit -n" in caplog.text
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert open_files_limit() == soft or soft == resource.RLIM_INFINITY


def test_running_out_of_files_is_transient_and_other_os_errors_are_not() -> None:
    emfile = OSError(errno.EMFILE, "Too many open files")
    assert is_resource_shortage(emfile)
    assert is_transient(emfile)
    wrapped = RuntimeError("could not connect")
    wrapped.__cause__ = emfile
    assert is_resource_shortage(wrapped)
    assert is_transient(wrapped)
    denied = OSError(errno.EACCES, "Permission denied")
    assert not is_resource_shortage(denied)
    assert not is_transient(denied)


def test_a_repeated_complaint_is_logged_once_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    once = LogOnce(logging.getLogger("peers-test"), interval_seconds=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="peers-test"):
        assert once.report("10.0.0.9", "bad input from %s", "10.0.0.9")
        for _ in range(500):
            assert not once.report("10.0.0.9", "bad input from %s", "10.0.0.9")
        assert once.report("10.0.0.7", "bad input from %s", "10.0.0.7")  # another source
        now[0] = 61
        assert once.report("10.0.0.9", "bad input from %s", "10.0.0.9")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "bad input from 10.0.0.9",
        "bad input from 10.0.0.7",
        "bad input from 10.0.0.9 (500 more like it from this source since the last report)",
    ]


def test_sources_are_bounded() -> None:
    once = LogOnce(logging.getLogger("peers-test"), max_sources=10)
    for number in range(1000):
        once.report(f"source-{number}", "x")
    assert len(once._sources) == 10


def test_failed_logins_wait_longer_each_time_until_one_succeeds() -> None:
    throttle = LoginThrottle(first_delay=0.25, max_delay=4.0)
    delays = [throttle.failed("10.0.0.9") for _ in range(7)]
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert throttle.failed("10.0.0.7") == 0.25  # per source
    throttle.succeeded("10.0.0.9")
    assert throttle.failed("10.0.0.9") == 0.25
