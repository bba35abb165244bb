"""Which RPC equipment is online: recorded on every hello, heartbeat, publish and disconnect.

Everything the RPC side learns about liveness goes through ``Liveness.mark_seen`` and
``Liveness.mark_gone`` and nowhere else. Both keep this instance's own view (``status``: which
equipment has a connection here, and why it went) and report to the host's equipment hub
(``gateway.equipment``), where every instance and the recipe engine see it:

- ``mark_seen`` -> ``hub.heartbeat(id, timeout_seconds=ttl_seconds)``: online for ``ttl_seconds``
  more (the server's ``heartbeat_timeout_seconds``). The binding also calls it every third of
  that while a connection is open, so equipment stays online while connected even when it sends
  nothing (equipment servers the gateway connects to send no heartbeats), and goes offline
  within ``ttl_seconds`` if this instance dies with the connection;
- ``mark_gone`` -> ``hub.gone(id, "disconnected (<why>)")``: offline at once.

A failing hub (the store unreachable) is logged once per outage (``gateway.resilience``) and
does not break the connection: the instance's own view is kept either way, and the next sign of
life reports again. It fails no readiness check: equipment that goes away during the outage
would leave nothing to report, and the check failing for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from gateway.resilience import Outage

if TYPE_CHECKING:
    from gateway.equipment import EquipmentHub
    from gateway_msgpack_rpc.forwarding import Forwarding

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 30.0
"""How long a sign of life counts when the server's heartbeat timeout is 0 (never)."""

HUB_TIMEOUT_SECONDS = 5.0
"""Longest wait for the hub (the store) to record a change."""


@dataclass(frozen=True)
class EquipmentStatus:
    """What is known about one equipment: online or not, since when, and why it went."""

    equipment_id: str
    online: bool
    last_seen: float  # time.time() of the last sign of life
    reason: str = ""  # why it went offline


class Liveness:
    """Online/offline per equipment id, for this gateway instance's RPC connections.

    ``ttl_seconds``: how long a sign of life keeps equipment online in the hub. Signs of life
    closer together than a tenth of it are reported to the hub once (a busy connection
    publishing many events costs no store write per event).
    """

    def __init__(self, *, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self.ttl_seconds = ttl_seconds or DEFAULT_TTL_SECONDS
        self.hub: EquipmentHub | None = None
        self.owners: Forwarding | None = None  # records which instance has the connection
        self._status: dict[str, EquipmentStatus] = {}
        self._reported: dict[str, float] = {}  # id -> time.monotonic() of the last hub write
        # The hub and the owners' record may fail apart (each logged once per outage).
        self._hub_outage = Outage("msgpack-rpc.liveness", None, logger=log)
        self._owners_outage = Outage("msgpack-rpc.liveness owners", None, logger=log)

    def attach(self, hub: EquipmentHub, *, owners: Forwarding | None = None) -> None:
        """Report to ``hub`` from now on, and record connections in ``owners`` (the binding
        does it when the gateway runs)."""
        self.hub = hub
        self.owners = owners

    @property
    def refresh_seconds(self) -> float:
        """How often an open connection renews its equipment's liveness in the hub."""
        return self.ttl_seconds / 3

    async def mark_seen(self, equipment_id: str) -> None:
        """A sign of life (hello, heartbeat, publish, a connection made or still open)."""
        previous = self._status.get(equipment_id)
        came_online = previous is None or not previous.online
        if came_online:
            log.info("equipment %s online (MessagePack-RPC)", equipment_id)
        self._status[equipment_id] = EquipmentStatus(equipment_id, True, time.time())
        now = time.monotonic()
        last = self._reported.get(equipment_id)
        if not came_online and last is not None and now - last < self.ttl_seconds / 10:
            return
        self._reported[equipment_id] = now
        hub = self.hub
        if hub is not None:
            await self._tell_hub(
                equipment_id,
                lambda: hub.heartbeat(equipment_id, timeout_seconds=self.ttl_seconds),
                self._hub_outage,
            )
        owners = self.owners
        if owners is not None:
            await self._tell_hub(
                equipment_id, lambda: owners.claim(equipment_id), self._owners_outage
            )

    async def mark_gone(self, equipment_id: str, reason: str) -> None:
        """The equipment's connection ended (disconnect, heartbeat timeout, gateway stopping)."""
        previous = self._status.get(equipment_id)
        last_seen = previous.last_seen if previous is not None else time.time()
        if previous is None or previous.online:
            log.warning("equipment %s offline (MessagePack-RPC): %s", equipment_id, reason)
        self._status[equipment_id] = EquipmentStatus(equipment_id, False, last_seen, reason)
        self._reported.pop(equipment_id, None)
        hub = self.hub
        if hub is not None:
            await self._tell_hub(
                equipment_id,
                lambda: hub.gone(equipment_id, f"disconnected ({reason})"),
                self._hub_outage,
            )
        owners = self.owners
        if owners is not None:
            await self._tell_hub(
                equipment_id, lambda: owners.release(equipment_id), self._owners_outage
            )

    def is_online(self, equipment_id: str) -> bool:
        status = self._status.get(equipment_id)
        return status is not None and status.online

    def status(self, equipment_id: str) -> EquipmentStatus | None:
        return self._status.get(equipment_id)

    def known(self) -> list[EquipmentStatus]:
        """Every equipment seen since this instance started, online or not."""
        return list(self._status.values())

    async def _tell_hub(
        self, equipment_id: str, report: Callable[[], Awaitable[None]], outage: Outage
    ) -> None:
        try:
            with anyio.fail_after(HUB_TIMEOUT_SECONDS):
                await report()
        except Exception as error:  # the store is down: the connection carries on regardless
            self._reported.pop(equipment_id, None)  # try again at the next sign of life
            outage.failed(error)
        else:
            outage.succeeded()
