"""``gateway demo`` from the command line, the way a newcomer runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

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
def test_the_demo_runs_over_a_real_broker(mqtt_url: str) -> None:
    result = demo("--jobs", "2", "--interval", "0.1", "--mqtt", mqtt_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"broker {mqtt_url}" in result.stdout
    assert "2 jobs, 2 completed, 0 aborted" in result.stdout


def test_the_demo_recipe_is_the_documented_example() -> None:
    shipped = json.loads((resources.files("gateway_demo") / "rear_axle.json").read_text())
    assert shipped == json.loads(EXAMPLE.read_text())
