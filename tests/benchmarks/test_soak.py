"""A short soak (``benchmarks/soak.py``): two gateway processes, the simulated station, a
steady MES that stores, runs, reads and clears jobs, instance ``b`` killed with SIGKILL and
restarted twice. Nothing is lost or ended twice, heartbeats leave no marker, Redis holds no
more than the retention implies and nothing without a TTL is left once every job is cleared,
and the long-lived process neither leaks file descriptors nor grows much.

The 30-minute version with its figures per hour is run by hand (README, "Retention and
memory"); a minute cannot tell a leak of kilobytes per job from the noise of the allocator,
so the memory bound here is coarse.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration]

SOAK = Path(__file__).parents[2] / "benchmarks" / "soak.py"
RETENTION = 15


def test_a_short_soak_with_kills_loses_nothing_and_stays_bounded(tmp_path: Path) -> None:
    figures_file = tmp_path / "soak.json"
    arguments = [
        "--minutes", "0.75",
        "--concurrency", "3",
        "--kill-every", "15",
        "--restart-after", "1",
        "--sample-every", "2",
        "--warmup", "10",
        "--retention", str(RETENTION),
        "--drain", "40",
        "--json", str(figures_file),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(SOAK), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures: dict[str, Any] = json.loads(figures_file.read_text())
    jobs, redis, usage = figures["jobs"], figures["redis"], figures["store_usage"]
    print(done.stdout)

    assert figures["kills"] >= 2
    assert jobs["stored"] >= 20, jobs
    assert jobs["lost"] == []
    assert jobs["ended_twice"] == []
    assert jobs["refused"] == []
    assert jobs["ended"] == jobs["cleared"] == jobs["stored"]

    assert redis["global_markers_most"] == 0  # heartbeats leave no de-duplication marker
    # Every job cleared: what has no TTL is configuration, streams and indexes, not jobs.
    assert redis["lasting_keys"] is not None
    assert redis["lasting_keys"] <= 40, usage["kinds"]
    # What expires is what the retention keeps of the jobs of its last window.
    per_job = usage["per_job"]
    assert per_job is not None
    held = jobs["per_second"] * per_job["kept_seconds"] * per_job["keys"]
    assert usage["expiring_keys"] <= 2 * held + 100, (usage, jobs)
    assert per_job["kept_seconds"] <= max(RETENTION, 60)  # kept events: 60 s
    # At every sample after the retention, the keys held are what the jobs ended within it
    # imply, not more (None: too few samples to tell on a slow machine).
    over = redis["keys_over_retention_most"]
    assert over is None or over <= 2.0, redis

    survivor = figures["processes"]["a"]
    assert survivor["fds_last"] <= survivor["fds_warm"] + 5, survivor
    assert survivor["rss_mb_last"] <= survivor["rss_mb_warm"] + 40, survivor
