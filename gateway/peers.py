"""Bounds on what a peer can make the gateway hold: open files, and log lines.

Every server the gateway runs (HTTP, MessagePack-RPC) caps its connections, and the caps stay
below the process's open-file limit with room kept for what the gateway itself opens (its Redis
pool, its MQTT connections, log files): a peer that opens connections until the limit is reached
is refused, while the store and the broker keep working. ``connection_cap`` gives a server its
cap; ``is_resource_shortage`` says whether a failure was the process (or the machine) running out
of files, buffers or memory: such a failure passes by itself and is transient, never a reason to
drop work.

A peer that sends the same bad input again and again must not flood the log: ``LogOnce`` logs
the first of a kind from a source and then at most once per interval, with the count of the ones
left out meanwhile.
"""

from __future__ import annotations

import errno
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger(__name__)

# Files kept for the gateway itself whatever the servers take: the Redis pool (128 by default),
# the MQTT lanes, the embedded Redis, log files, libraries' own descriptors.
RESERVED_FILES = 256
# Errors that mean "out of descriptors, buffers or memory for now".
SHORTAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def open_files_limit() -> int:
    """The process's soft limit of open files."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(setting: str, wanted: int, *, servers: int = 2) -> int:
    """The connections one server may hold: ``wanted`` (the setting's value), lowered so the
    ``servers`` the gateway may run together stay below the open-file limit with
    ``RESERVED_FILES`` kept for the gateway's own connections (said once in the log)."""
    room = max(1, (open_files_limit() - RESERVED_FILES) // servers)
    if wanted <= room:
        return wanted
    log.warning(
        "%s = %d lowered to %d: the open-file limit is %d, and %d files stay for the gateway's "
        "own connections (raise the limit with ulimit -n, or LimitNOFILE= in systemd)",
        setting,
        wanted,
        room,
        open_files_limit(),
        RESERVED_FILES,
    )
    return room


def is_resource_shortage(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the process running out of files or memory."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in SHORTAGE_ERRNOS:
            return True
        if isinstance(current, MemoryError):
            return True
        current = current.__cause__ or current.__context__
    return False


class LogOnce:
    """Logs a repeated complaint about one source once per ``interval_seconds``.

    ``report(source, message, *args)`` logs the first complaint about ``source`` at once; further
    ones within the interval are only counted, and the next one logged after it says how many
    were left out. At most ``max_sources`` sources are remembered (the oldest are forgotten), so
    a peer inventing new source names cannot grow it either.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        level: int = logging.WARNING,
        interval_seconds: float = 60.0,
        max_sources: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.level = level
        self.interval_seconds = interval_seconds
        self.max_sources = max_sources
        self.clock = clock
        self._sources: OrderedDict[str, tuple[float, int]] = OrderedDict()  # last logged, left out

    def report(self, source: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log (or count) one complaint about ``source``; whether it was logged (with the
        exception being handled when ``exc_info``)."""
        now = self.clock()
        known = self._sources.get(source)
        if known is not None and now - known[0] < self.interval_seconds:
            self._sources[source] = (known[0], known[1] + 1)
            return False
        left_out = known[1] if known is not None else 0
        self._sources[source] = (now, 0)
        self._sources.move_to_end(source)
        while len(self._sources) > self.max_sources:
            self._sources.popitem(last=False)
        if left_out:
            message += " (%d more like it from this source since the last report)"
            args = (*args, left_out)
        self.logger.log(self.level, message, *args, exc_info=exc_info)
        return True


class LoginThrottle:
    """Slows a guesser down: each failed login from a source is answered only after a delay
    that doubles with its failures in a row (``first_delay`` up to ``max_delay`` seconds), reset
    by a success. Sources are bounded as in ``LogOnce``."""

    def __init__(
        self, *, first_delay: float = 0.25, max_delay: float = 4.0, max_sources: int = 1000
    ) -> None:
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.max_sources = max_sources
        self._failures: OrderedDict[str, int] = OrderedDict()

    def failed(self, source: str) -> float:
        """Count a failure; the seconds to wait before answering it."""
        failures = self._failures.pop(source, 0) + 1
        self._failures[source] = failures
        while len(self._failures) > self.max_sources:
            self._failures.popitem(last=False)
        return min(self.max_delay, self.first_delay * float(2 ** min(failures - 1, 16)))

    def succeeded(self, source: str) -> None:
        self._failures.pop(source, None)
