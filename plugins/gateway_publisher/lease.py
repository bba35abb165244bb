"""A lease in the store that keeps one publisher active, whatever runs how many replicas.

The publisher is meant to run as one replica, but a rolling update overlaps the old and the new
pod, and ``gateway run`` with the default role runs every service on every instance. Two active
publishers would interleave sequence numbers and move the cursors under each other, so each
one takes this lease first and the others wait as standbys.

The holder renews it well within its lifetime and stops publishing as soon as it cannot be sure
it still holds it. An instance that restarts under the same instance id takes its own lease
back at once instead of waiting for it to run out (a SIGKILLed publisher comes back quickly).
"""

from __future__ import annotations

import time

from gateway.store import Store

# KEYS[1] lease; ARGV[1] token "<instance id> <epoch>", ARGV[2] "<instance id> ", ARGV[3] ms.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] or string.sub(holder, 1, #ARGV[2]) == ARGV[2] then
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
    def __init__(self, store: Store, *, instance_id: str, epoch: str, seconds: float) -> None:
        self.store = store
        self.key = store.keys.global_key("publisher", "lease")
        self.instance_id = instance_id
        self.token = f"{instance_id} {epoch}"
        self.seconds = seconds
        self._valid_until = 0.0

    async def acquire(self) -> bool:
        """Take or renew the lease; ``False`` while another instance holds it."""
        started = time.monotonic()
        milliseconds = int(self.seconds * 1000)
        held = await self.store.client.eval(
            _ACQUIRE, 1, self.key, self.token, f"{self.instance_id} ", milliseconds
        )
        if held:
            # Counted from before the request and with a margin, never from the server's view.
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
