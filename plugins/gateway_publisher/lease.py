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

from gateway.leases import Lease as StoreLease
from gateway.store import Store


class Lease(StoreLease):
    """The publisher's lease (``gateway.leases``), a global key; taken back at once by the same
    instance id after a restart."""

    def __init__(self, store: Store, *, instance_id: str, epoch: str, seconds: float) -> None:
        key = store.keys.global_key("publisher", "lease")
        super().__init__(
            store, key, f"{instance_id} {epoch}", seconds, holder_prefix=f"{instance_id} "
        )
        self.instance_id = instance_id
