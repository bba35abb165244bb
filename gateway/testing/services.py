"""Private ``redis-server`` and ``mosquitto`` processes on free ports, for tests.

Each server runs in its own temporary directory with a config written here, so tests never depend
on (or disturb) whatever else runs on the machine.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited with {process.returncode}: {log.read_text()[-2000:]}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"server did not listen on port {port} within {timeout} s")


def find_executable(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError(f"{name} is not installed (CI installs it with apt-get; see .ci/run)")


@dataclass
class ServerProcess:
    """A server started by ``start``; ``stop`` ends it, ``restart`` brings it back on its port."""

    name: str
    command: list[str]
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    def start(self, timeout: float = 10.0) -> ServerProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )
        _wait_for_port(self.port, self.process, self.log_path, timeout)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory (config, data, log)."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def redis_server(directory: Path | None = None) -> ServerProcess:
    """A redis-server on a free loopback port, appending to its own AOF."""
    directory = directory or Path(tempfile.mkdtemp(prefix="gw-redis-"))
    port = free_port()
    command = [
        find_executable("redis-server"),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--protected-mode",
        "no",
    ]
    return ServerProcess("redis", command, port, directory)


def mosquitto(directory: Path | None = None, extra_config: str = "") -> ServerProcess:
    """A mosquitto broker on a free loopback port (anonymous, TCP_NODELAY, no persistence)."""
    directory = directory or Path(tempfile.mkdtemp(prefix="gw-mosquitto-"))
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "set_tcp_nodelay true\n"
        "persistence false\n"
        "max_queued_messages 10000\n"
        f"{extra_config}\n"
    )
    return ServerProcess(
        "mosquitto", [find_executable("mosquitto"), "-c", str(config)], port, directory
    )


@contextlib.contextmanager
def running(server: ServerProcess) -> Iterator[ServerProcess]:
    server.start()
    try:
        yield server
    finally:
        server.close()
