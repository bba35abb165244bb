"""``gateway run`` with a broker that is not there, as an operator meets it: a clear message at
once, repeated at the configured interval (not at every retry), and a clean stop on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from gateway.testing.cli import command_environ, gateway_command

pytestmark = pytest.mark.integration


def test_an_unreachable_broker_is_reported_clearly_and_again(
    redis_url: str, unique: str, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = command_environ(
        GATEWAY_MQTT_URL=f"mqtt://127.0.0.1:{port}",
        GATEWAY_MQTT_RECONNECT_MIN_SECONDS="0.05",
        GATEWAY_MQTT_RECONNECT_MAX_SECONDS="0.1",
        GATEWAY_MQTT_UNREACHABLE_REPORT_SECONDS="1",
        GATEWAY_REDIS_URL=redis_url,
        GATEWAY_REDIS_KEY_PREFIX=unique,
        GATEWAY_GATEWAY_DATA_DIR=str(tmp_path),
    )
    gateway = subprocess.Popen(
        [*gateway_command(), "run"],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    reports: list[tuple[float, str]] = []
    retries_logged = 0
    try:
        assert gateway.stderr is not None
        deadline = time.monotonic() + 90
        while len(reports) < 2 and time.monotonic() < deadline:
            line = gateway.stderr.readline()
            assert line, "the gateway ended before reporting twice"
            if f"MQTT broker 127.0.0.1:{port}" in line and "unreachable" in line:
                reports.append((time.monotonic(), line))
            elif "retrying in" in line:
                retries_logged += 1
        gateway.send_signal(signal.SIGTERM)
        _, rest = gateway.communicate(timeout=60)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.communicate()
    assert len(reports) == 2
    first, second = reports[0][1], reports[1][1]
    assert "WARNING" in first
    assert f"MQTT broker 127.0.0.1:{port} unreachable" in first
    assert "the gateway starts once it answers; check mqtt.url" in first
    assert "WARNING" in second
    assert "still unreachable for " in second  # how long, in the reminder
    assert retries_logged == 0  # ~20 retries a second, none of them at WARNING
    assert gateway.returncode == 0
    assert "Traceback" not in rest
