"""``gateway demo`` from the command line, the way a newcomer runs it."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json"


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GATEWAY_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "demo", "--seed", "7", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_demo_runs_the_station_to_completion_with_nothing_installed() -> None:
    result = demo("--jobs", "3", "--interval", "0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "in-process broker, embedded Redis" in result.stdout
    assert "3 jobs, 3 completed, 0 aborted" in result.stdout
    assert result.stdout.count("Ended/Completed  torque") == 3
    assert "QA passed" in result.stdout


@pytest.mark.integration
def test_the_demo_runs_over_a_real_broker_and_says_so_in_json(mqtt_url: str) -> None:
    result = demo("--jobs", "2", "--interval", "0.1", "--mqtt", mqtt_url, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"broker {mqtt_url}" in result.stderr  # stdout holds only the JSON document
    document = json.loads(result.stdout)
    assert (document["jobs"], document["completed"], document["aborted"]) == (2, 2, 0)
    assert document["recipe_steps"] > 0
    for job in document["results"].values():
        assert job["state"] == ["Ended", "Completed"]
        assert job["results"]["tighten"]["torque"] > 0


def test_the_demo_recipe_is_the_documented_example() -> None:
    shipped = json.loads((resources.files("gateway_demo") / "rear_axle.json").read_text())
    assert shipped == json.loads(EXAMPLE.read_text())


def start_demo(*args: str, **options: Any) -> subprocess.Popen[str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GATEWAY_")}
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "demo", "--seed", "7", *args],
        env={**environ, "COLUMNS": "80", "LINES": "24"},
        text=True,
        **options,
    )


def test_ctrl_c_ends_the_demo_with_a_partial_summary_and_no_warnings() -> None:
    running = start_demo(
        "--jobs", "200", "--interval", "0.2", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert running.stdout is not None
        assert running.stdout.readline().startswith("Station gateway demo: 200 rear-axle jobs")
        assert "jobs 0/200 done" in running.stdout.readline()  # the station is working
        running.send_signal(signal.SIGINT)
        out, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 130
    assert "Demo interrupted after" in out
    assert "of 200 jobs completed" in out
    assert "The gateway stopped cleanly." in out
    assert err == ""  # no warnings, no traceback


def test_no_broker_at_the_given_url_is_reported_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = demo("--mqtt", f"mqtt://127.0.0.1:{port}", "--timeout", "8")
    assert time.monotonic() - started < 60  # not the ten minutes of retries it once was
    assert result.returncode == 1
    assert result.stderr == (
        f"gateway demo: cannot reach the MQTT broker at 127.0.0.1:{port} "
        "([Errno 111] Connection refused); start one, or leave out --mqtt\n"
    )


def test_no_redis_at_the_given_url_is_one_line() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = demo("--redis", f"redis://127.0.0.1:{port}/0", "--timeout", "20")
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"gateway demo: cannot connect to Redis at redis://127.0.0.1:{port}/0"
    )
    assert result.stderr.endswith("; check --redis\n")
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert "GATEWAY_REDIS_URL" not in result.stderr  # the flag, not a variable, set it


def test_the_live_view_fits_80_columns_in_a_terminal() -> None:
    """In a real (pseudo) terminal of 80 columns: every line drawn fits, nothing wraps."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    running = start_demo(
        "--jobs", "4", "--interval", "0.1", stdin=terminal, stdout=terminal, stderr=terminal
    )
    os.close(terminal)
    output = bytearray()
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the demo has ended
                break
            if not chunk:
                break
            output += chunk
        assert running.wait(timeout=120) == 0, output.decode(errors="replace")
    finally:
        os.close(controller)
        if running.poll() is None:
            running.kill()
            running.wait()
    text = output.decode()
    assert "\x1b[1A" in text  # redrawn in place (cursor up), not appended
    visible = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    lines = [line for line in re.split(r"\r\n|\r|\n", visible) if line]
    assert max(len(line) for line in lines) <= 80
    assert any("AXLE-0001" in line and "Ended/Completed" in line for line in lines)


def test_with_ui_the_demo_serves_the_ui_after_the_run_until_ctrl_c() -> None:
    running = start_demo(
        "--jobs", "2", "--interval", "0.1", "--ui", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert running.stdout is not None
        assert running.stdout.readline().startswith("Station gateway demo: 2 rear-axle jobs")
        url = running.stdout.readline().strip().removeprefix("The web UI: ")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/", url), url
        lines = []
        for line in running.stdout:  # the run, its summary, then the UI stays
            lines.append(line)
            if line.startswith("The web UI stays at"):
                break
        assert line.strip() == f"The web UI stays at {url} (Ctrl-C ends).", lines
        assert running.poll() is None  # serving, after the run
        with urllib.request.urlopen(url, timeout=30) as page:
            html = page.read().decode()
        assert 'data-scope="' in html  # the dashboard, with the demo's scope
        timeline = url + "scopes/cell/timeline?minutes=60"
        with urllib.request.urlopen(timeline.replace("/ui/", "/api/", 1), timeout=30) as api:
            done = json.load(api)
        assert {job["job_order_id"] for job in done["jobs"]} == {"AXLE-0001", "AXLE-0002"}
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 0  # the run completed; Ctrl-C only ended the serving
    assert err == ""


def test_the_live_view_lists_each_job_once() -> None:
    """Out of a terminal, a line per change: a running job is never also listed as waiting."""
    result = demo("--jobs", "4", "--interval", "0.05")
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        running = re.search(r"running: ([^ ]+(?:, [^ ]+)*)", line)
        waiting = re.search(r"waiting: (.*)$", line)
        if running and waiting:
            names = {name.split()[0] for name in waiting.group(1).split(", ")}
            assert not set(running.group(1).split(", ")) & names, line
