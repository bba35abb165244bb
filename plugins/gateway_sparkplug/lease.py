"""Who speaks for a scope: a lease per scope in the store, and the scope's ``bdSeq``.

Sparkplug wants one publisher per edge node (``seq`` is one sequence), so of the instances
running the service one holds the scope's lease and speaks; the others wait as standbys and one
takes over once the lease runs out (its holder died or lost the store). Each term connects
anew and draws the next ``bdSeq`` from the store, so a host sees a new birth with a new
``bdSeq`` after a failover, as the specification asks. The mechanism is the MES publisher's
(a token in a key with a time to live; the holder renews it well within its lifetime and stops
speaking as soon as it cannot be sure it still holds it), on the scope's own key.
"""

from __future__ import annotations

import time

from gateway.store import Store

# KEYS[1] lease; ARGV[1] token, ARGV[2] milliseconds.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
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


class ScopeLease:
    def __init__(self, store: Store, scope: str, token: str, seconds: float) -> None:
        self.store = store
        self.key = store.keys.scoped(scope, "sparkplug", "lease")
        self.bd_seq_key = store.keys.scoped(scope, "sparkplug", "bdseq")
        self.token = token
        self.seconds = seconds
        self._valid_until = 0.0

    async def acquire(self) -> bool:
        """Take or renew the lease; ``False`` while another instance holds it."""
        started = time.monotonic()
        held = await self.store.client.eval(
            _ACQUIRE, 1, self.key, self.token, int(self.seconds * 1000)
        )
        if held:
            # Counted from before the request, with a margin: never from the server's view.
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
        self._valid_until = 0.0
        await self.store.client.eval(_RELEASE, 1, self.key, self.token)

    async def next_bd_seq(self) -> int:
        """The ``bdSeq`` of a new term: one more than the last term's, modulo 256."""
        return int(await self.store.client.incr(self.bd_seq_key)) % 256
