"""Which RPC equipment is online: recorded on every hello, heartbeat, publish and disconnect.

Everything the RPC side learns about liveness goes through ``Liveness.mark_seen`` and
``Liveness.mark_gone`` and nowhere else, so wiring it to the host's equipment liveness (when
``gateway.equipment`` offers it) is a change to these two methods only. They are coroutines
already because the host keeps liveness in the store, shared by all instances.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EquipmentStatus:
    """What is known about one equipment: online or not, since when, and why it went."""

    equipment_id: str
    online: bool
    last_seen: float  # time.time() of the last sign of life
    reason: str = ""  # why it went offline


class Liveness:
    """Online/offline per equipment id, for this gateway instance's RPC connections."""

    def __init__(self) -> None:
        self._status: dict[str, EquipmentStatus] = {}

    async def mark_seen(self, equipment_id: str) -> None:
        """A sign of life (hello, heartbeat, publish, a connection made)."""
        previous = self._status.get(equipment_id)
        if previous is None or not previous.online:
            log.info("equipment %s online (MessagePack-RPC)", equipment_id)
        self._status[equipment_id] = EquipmentStatus(equipment_id, True, time.time())

    async def mark_gone(self, equipment_id: str, reason: str) -> None:
        """The equipment's connection ended (disconnect, heartbeat timeout, replaced...)."""
        previous = self._status.get(equipment_id)
        last_seen = previous.last_seen if previous is not None else time.time()
        if previous is None or previous.online:
            log.warning("equipment %s offline (MessagePack-RPC): %s", equipment_id, reason)
        self._status[equipment_id] = EquipmentStatus(equipment_id, False, last_seen, reason)

    def is_online(self, equipment_id: str) -> bool:
        status = self._status.get(equipment_id)
        return status is not None and status.online

    def status(self, equipment_id: str) -> EquipmentStatus | None:
        return self._status.get(equipment_id)

    def known(self) -> list[EquipmentStatus]:
        """Every equipment seen since this instance started, online or not."""
        return list(self._status.values())
