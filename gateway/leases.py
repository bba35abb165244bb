"""A lease in the store: one holder at a time does something, the others wait as standbys.

Used where two active instances would break a sequence (the MES publisher, a Sparkplug edge
node). The holder renews the lease well within its lifetime and stops as soon as it cannot be
sure it still holds it: its own view of the time left is counted from before each request, with
a margin, never from the server's. ``holder_prefix``: a token starting with it is the same
holder come back (an instance restarted under its id takes its lease back at once).
"""

from __future__ import annotations

import time

from gateway.store import Store

# KEYS[1] lease; ARGV[1] token, ARGV[2] holder prefix ("" for none), ARGV[3] milliseconds.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
local same = ARGV[2] ~= '' and holder and string.sub(holder, 1, #ARGV[2]) == ARGV[2]
if holder == false or holder == ARGV[1] or same then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  return 1
end
return 0
"""
# KEYS[1] lease; ARGV[1] token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Lease:
    def __init__(
        self, store: Store, key: str, token: str, seconds: float, *, holder_prefix: str = ""
    ) -> None:
        self.store = store
        self.key = key
        self.token = token
        self.seconds = seconds
        self.holder_prefix = holder_prefix
        self._valid_until = 0.0

    async def acquire(self) -> bool:
        """Take or renew the lease; ``False`` while another instance holds it."""
        started = time.monotonic()
        milliseconds = int(self.seconds * 1000)
        held = await self.store.client.eval(
            _ACQUIRE, 1, self.key, self.token, self.holder_prefix, milliseconds
        )
        if held:
            self._valid_until = started + self.seconds * 0.8
        return bool(held)

    @property
    def valid(self) -> bool:
        """Certainly still ours (renewed recently enough)."""
        return time.monotonic() < self._valid_until

    @property
    def renew_interval(self) -> float:
        return self.seconds / 4

    async def release(self) -> None:
        """Hand the lease over at once (on stopping), if it is still ours."""
        self._valid_until = 0.0
        await self.store.client.eval(_RELEASE, 1, self.key, self.token)
