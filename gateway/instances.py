"""Which gateway instances are alive, as seen through the store.

Each running instance refreshes its entry in a hash every few seconds and removes it when it
stops. A transport asks ``others_alive()`` when it shuts down: an MQTT session whose instance is
gone for good would otherwise keep receiving its share of the commands of a shared subscription
until the broker expires it, so an instance that knows others will take over leaves the share
group; the last one keeps its session so commands wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from gateway.resilience import Resilience
    from gateway.store import Store

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
# An instance that has not refreshed its entry for this long counts as gone.
ALIVE_WITHIN_SECONDS = 3 * HEARTBEAT_SECONDS


class InstanceRegistry:
    """This instance's entry in the store's ``InstanceTable``, and who else is alive."""

    def __init__(
        self, store: Store, instance_id: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.instance_id = instance_id
        self.clock = clock

    async def beat(self) -> None:
        await self.store.instances.beat(self.instance_id, self.clock())

    async def leave(self) -> None:
        await self.store.instances.leave(self.instance_id)

    async def alive(self) -> set[str]:
        """Instances that refreshed their entry recently (this one included, if running)."""
        horizon = self.clock() - ALIVE_WITHIN_SECONDS
        return {
            name for name, seen in (await self.store.instances.seen()).items() if seen >= horizon
        }

    async def store_id(self) -> str:
        """The identity of the store this instance records itself in (see ``InstanceTable``)."""
        return await self.store.instances.store_id()

    async def others_alive(self) -> bool:
        return bool(await self.alive() - {self.instance_id})

    async def gone(self) -> dict[str, float]:
        """Other instances that stopped refreshing their entry without removing it (killed, or
        frozen for longer than ``ALIVE_WITHIN_SECONDS``): instance id -> when last seen."""
        horizon = self.clock() - ALIVE_WITHIN_SECONDS
        return {
            name: seen
            for name, seen in (await self.store.instances.seen()).items()
            if seen < horizon and name != self.instance_id
        }

    async def claim(self, instance_id: str) -> bool:
        """Remove a gone instance's entry to take over what it left: ``True`` for the one
        instance that removed it (the store removes an entry once)."""
        return await self.store.instances.leave(instance_id)

    async def restore(self, instance_id: str, last_seen: float) -> None:
        """Put back a claimed entry whose take-over failed, to be tried again."""
        await self.store.instances.beat(instance_id, last_seen)

    async def run(self, stopping: anyio.Event, resilience: Resilience | None = None) -> None:
        """Refresh the entry until ``stopping`` is set (the entry is removed by ``leave``).

        A store outage fails the readiness check ``instances`` (logged once) until a beat is
        stored again; the next beat comes after the backoff or the heartbeat, whichever is
        sooner.
        """
        outage = resilience.outage("instances", logger=log) if resilience is not None else None
        try:
            while not stopping.is_set():
                try:
                    await self.beat()
                except Exception as error:  # the store may be away: try again soon
                    if outage is None:
                        log.warning("instance heartbeat not stored: %s", error)
                    else:
                        wait = min(HEARTBEAT_SECONDS, outage.failed(error))
                        await outage.pause(wait, stopping)
                        continue
                else:
                    if outage is not None:
                        outage.succeeded()
                with anyio.move_on_after(HEARTBEAT_SECONDS):
                    await stopping.wait()
        finally:
            if outage is not None:
                outage.close()
