"""A gateway running as a process of its own, for tests that kill (SIGKILL), freeze (SIGSTOP)
and restart it."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class GatewayProcess:
    """``python <script>`` (or ``python -m gateway.cli <arguments>`` when ``script`` is
    ``None``) with ``environ``, logging to ``log``; restartable under one identity.

    ``ready_line`` is the log text each start writes once it is up: ``ready()`` is true once
    the log holds it as often as the process was started.
    """

    script: Path | None
    environ: dict[str, str]
    log: Path
    ready_line: str
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    arguments: tuple[str, ...] = ()
    max_open_files: int | None = None  # the process's open-file limit (ulimit -n), if lower

    def _limit_files(self) -> None:
        if self.max_open_files is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.max_open_files, hard))

    @property
    def command(self) -> list[str]:
        if self.script is None:
            return [sys.executable, "-m", "gateway.cli", *self.arguments]
        return [sys.executable, str(self.script), *self.arguments]

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                env=self.environ,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=self._limit_files if self.max_open_files is not None else None,
            )

    @property
    def returncode(self) -> int | None:
        """``None`` while the process runs (or was never started)."""
        return self.process.poll() if self.process is not None else None

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its connections but does nothing, as a stalled VM."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after ``freeze``."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def ready(self) -> bool:
        return self.log.read_text(errors="replace").count(self.ready_line) >= self.starts

    def wait_ready(self, timeout: float = 120) -> None:
        """Block until ``ready()``, for scripts without an event loop (the benchmarks);
        ``RuntimeError`` with the log's tail when the process ends or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.returncode is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the gateway did not start:\n{tail}")
            time.sleep(0.05)  # another process's log: nothing to wait on but the file

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, as when a machine loses power."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 15) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a frozen process could not stop
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
