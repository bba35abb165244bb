"""Who speaks for a scope: a lease per scope in the store, and the scope's ``bdSeq``.

Sparkplug wants one publisher per edge node (``seq`` is one sequence), so of the instances
running the service one holds the scope's lease and speaks; the others wait as standbys and one
takes over once the lease runs out (its holder died or lost the store). Each term connects
anew and draws the next ``bdSeq`` from the store, so a host sees a new birth with a new
``bdSeq`` after a failover, as the specification asks. The lease is the host's
(``gateway.leases``), on the scope's own key.
"""

from __future__ import annotations

from gateway.leases import Lease
from gateway.store import Store


class ScopeLease(Lease):
    def __init__(self, store: Store, scope: str, token: str, seconds: float) -> None:
        super().__init__(store, store.keys.scoped(scope, "sparkplug", "lease"), token, seconds)
        self.bd_seq_key = store.keys.scoped(scope, "sparkplug", "bdseq")

    async def next_bd_seq(self) -> int:
        """The ``bdSeq`` of a new term: one more than the last term's, modulo 256."""
        return int(await self.store.client.incr(self.bd_seq_key)) % 256
