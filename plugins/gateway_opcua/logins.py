"""A pause after a failed OPC UA login, per client certificate.

asyncua asks the user manager synchronously, inside the handling of the client's request, so
the server cannot make a refused client wait without making every client wait. Instead, a
refused login bars the client certificate of its secure channel for ``pause`` seconds: its
logins are refused unchecked until then, so guessing costs a new certificate (a new key pair)
per try. The bar is per certificate, never per user name: nobody can lock the MES's login out
by guessing its password, as the MES's certificate is its own. A channel without message
security (only where ``opcua.security = None`` allows it) has no certificate: such clients
share one bar.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger(__name__)

_NO_CERTIFICATE = "no certificate"


class FailedLogins:
    """Which client certificates are barred after a failed login, and until when."""

    def __init__(
        self,
        pause: float,
        *,
        capacity: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pause = pause
        self.capacity = capacity  # certificates remembered at once: a flood costs itself
        self.clock = clock
        self._barred: OrderedDict[str, float] = OrderedDict()  # certificate -> barred until
        self.refused_unchecked = 0

    def barred(self, certificate: bytes | None) -> bool:
        """Whether a login on a channel with ``certificate`` is refused without a check."""
        key = _key(certificate)
        until = self._barred.get(key)
        if until is None:
            return False
        if self.clock() >= until:
            del self._barred[key]
            return False
        self.refused_unchecked += 1
        return True

    def failed(self, certificate: bytes | None) -> None:
        """A login on a channel with ``certificate`` was refused: bar it for ``pause``."""
        if self.pause <= 0:
            return
        now = self.clock()
        key = _key(certificate)
        self._barred.pop(key, None)
        self._barred[key] = now + self.pause
        self._forget_expired(now)
        while len(self._barred) > self.capacity:  # the oldest bars go first
            self._barred.popitem(last=False)

    def _forget_expired(self, now: float) -> None:
        # Insertion order is expiry order (one pause for all), so expired bars lead.
        while self._barred:
            key, until = next(iter(self._barred.items()))
            if until > now:
                return
            del self._barred[key]


def _key(certificate: bytes | None) -> str:
    if not certificate:
        return _NO_CERTIFICATE
    return hashlib.sha256(certificate).hexdigest()
