"""The README's "A first job" section, run word for word: its commands, as a new user types
them in the repository's root, complete a job on the simulated station.

The one difference: the broker. The section assumes one on ``localhost:1883``; the test gives
the commands a mosquitto of its own through ``GATEWAY_MQTT_URL`` (the setting the section names
for a broker elsewhere), and a data directory of its own (``XDG_DATA_HOME``) for the embedded
Redis.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.testing.services import mosquitto, running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"


def first_job_commands() -> list[str]:
    """The shell lines of the section's code block, comments off."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## A first job\n") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the first-job section has no sh block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def run(line: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        line, shell=True, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )


def until(
    condition: Callable[[], bool], gateway: subprocess.Popen[bytes], timeout: float = 60
) -> None:
    """Until ``condition`` holds (another process: nothing to wait on but asking again)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert gateway.poll() is None, "the gateway ended"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_readme_first_job_completes_a_job(tmp_path: Path) -> None:
    # A broker of its own: the section's names (share group, topics, client ids) are the
    # defaults, and its gateway's persistent session must not outlive the test on a broker
    # other tests share (it would take its share of their equipment replies).
    with running(mosquitto(tmp_path)) as broker:
        run_first_job(f"mqtt://127.0.0.1:{broker.port}", tmp_path)


def run_first_job(mqtt_url: str, tmp_path: Path) -> None:
    commands = first_job_commands()
    assert commands[0] == "gateway run --simulator"
    bin_dir = Path(sys.executable).parent  # where pip put the `gateway` script
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "GATEWAY_MQTT_URL": mqtt_url,
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    for name in [name for name in os.environ if name.startswith("GATEWAY_")]:
        environ.pop(name)  # a test runner's own settings are not the new user's
    environ["GATEWAY_MQTT_URL"] = mqtt_url
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        gateway = subprocess.Popen(
            "exec " + commands[0], shell=True, cwd=ROOT, env=environ, stdout=log, stderr=log
        )
    try:
        until(lambda: "started (role all)" in log_path.read_text(errors="replace"), gateway)
        for line in commands[1:-1]:
            done = run(line, environ)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
        show = commands[-1]
        assert show.startswith("gateway jobs show AXLE-0001")
        until(lambda: "Ended.Completed" in run(show, environ).stdout, gateway)
        shown = run(show, environ)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
    assert "Ended.Completed" in shown.stdout, shown.stdout
    assert "torque_ok" in shown.stdout  # the results, as the MES reads them
