"""Taking over the MQTT sessions of an instance that died and did not come back.

The broker hands a shared subscription's messages to every member session in turn, a
disconnected one included: it keeps them for that session until its client returns or the
session expires. An instance that stops cleanly leaves its share groups first (see
``MqttBinding._leave_share_group``); one that was killed, or whose machine died, cannot. Until a
supervisor restarts it under its id, its share of the MES's calls and of the equipment's replies
would wait in its session, and its jobs' actions would time out although every reply came.

So each instance looks, every ``ADOPT_EVERY_SECONDS``, for instances whose entry in the store's
instance table stayed but stopped being refreshed (``InstanceRegistry.gone``: no beat for
``ALIVE_WITHIN_SECONDS``). For each, it connects with that instance's client ids (one per lane),
takes the session over, unsubscribes the shared topics and handles what the broker had queued
there, exactly as the instance would have (acknowledged once handled). Messages on topics this
instance does not serve stay unacknowledged, for the instance itself. The entry is removed
first (``InstanceRegistry.claim``: the store removes it once), so one instance adopts each; only
instances of the all-in-one role adopt, as they serve every topic a gone instance may have had.

An instance that was only frozen and wakes up reconnects under its id, takes its session back
(the broker closes the adopter's connection, and what the adopter had not acknowledged goes back
to it) and subscribes again. A message handled by both is handled at least once, as every
message here: MES calls are de-duplicated, equipment replies are applied once by the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from gateway.topics import reply_topic
from gateway.transport import topic_matches
from gateway_mqtt.client import ConnectionLost, MqttClient, Received
from gateway_mqtt.settings import session_client_id

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.instances import InstanceRegistry
    from gateway_mqtt.binding import Lane, MqttBinding

log = logging.getLogger(__name__)

ADOPT_EVERY_SECONDS = 5.0
# No message for this long, none in hand: the adopted session is empty (MQTT has no end marker).
ADOPTION_QUIET_SECONDS = 1.0


async def wait_quiet(
    count: Callable[[], int],
    seconds: float,
    busy: Callable[[], bool] = lambda: False,
) -> None:
    """Return once ``count()`` (messages received) stood still, and nothing was ``busy()``,
    for ``seconds``: MQTT has no end-of-queue marker, a quiet moment has to do."""
    quiet = 0.0
    while quiet < seconds:
        before = count()
        await anyio.sleep(0.05)
        quiet = quiet + 0.05 if count() == before and not busy() else 0.0


class SessionAdopter:
    """Finds instances that died without leaving and takes over their MQTT sessions."""

    def __init__(self, binding: MqttBinding, registry: InstanceRegistry) -> None:
        self.binding = binding
        self.registry = registry

    async def run(self, gateway: Gateway) -> None:
        while True:  # until a stop is asked for (the binding itself serves until closing)
            with anyio.move_on_after(ADOPT_EVERY_SECONDS):
                await gateway.stopping.wait()
            if gateway.stopping.is_set():
                return
            try:
                gone = await self.registry.gone()
            except Exception as error:  # the store is away: its own checks say so
                log.debug("cannot tell which instances are gone: %s", error)
                continue
            for instance, last_seen in sorted(gone.items()):
                await self._adopt(gateway, instance, last_seen)

    async def _adopt(self, gateway: Gateway, instance: str, last_seen: float) -> None:
        try:
            if not await self.registry.claim(instance):
                return  # another instance takes it over
        except Exception as error:  # the store is away: its own checks say so
            log.debug("cannot claim gone instance %s: %s", instance, error)
            return
        try:
            handled = await self.adopt(gateway, instance)
        except Exception as error:
            # The instance came back (and took its session back), or the broker is away: try
            # again later, unless it beats again meanwhile.
            log.info("sessions of gone instance %s not taken over yet: %s", instance, error)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await self.registry.restore(instance, last_seen)
                except Exception as store_error:
                    log.warning("gone instance %s not put back: %s", instance, store_error)
            return
        log.warning(
            "instance %s stopped without leaving (last seen %.0f s ago): took over its MQTT "
            "sessions and handled the %d messages they held",
            instance,
            self.registry.clock() - last_seen,
            handled,
        )

    async def adopt(self, gateway: Gateway, instance_id: str) -> int:
        """Take over the sessions of ``instance_id``, which died in its share groups: leave
        them and handle what the broker had queued there. Returns the messages handled."""
        served = self.binding.served_filters(gateway)
        shared = [topic for _, topic in served if topic.startswith("$share/")]
        orphan_replies = reply_topic(self.binding.settings.reply_topic_prefix, instance_id)
        handled = 0
        for name in sorted({lane for lane, _ in served} | {""}):
            client_id = session_client_id(self.binding.settings, instance_id, name)
            lane = self.binding.lane(name, client_id)
            async with lane.connector.connect() as client:
                if client.session_present:
                    handled += await self._take_over(
                        client, gateway, lane, [*shared, orphan_replies], orphan_replies
                    )
        return handled

    async def _take_over(
        self,
        client: MqttClient,
        gateway: Gateway,
        lane: Lane,
        unsubscribe: list[str],
        orphan_replies: str,
    ) -> int:
        served = [
            topic.split("/", 2)[2] if topic.startswith("$share/") else topic
            for _, topic in self.binding.served_filters(gateway)
        ]
        taken = finished = 0
        lost: ConnectionLost | None = None

        async def handle(received: Received) -> None:
            nonlocal finished
            try:
                await self.binding.handle(client, gateway, received, lane)
            finally:
                finished += 1

        async with anyio.create_task_group() as handlers, anyio.create_task_group() as reading:

            async def read() -> None:
                nonlocal taken, lost
                try:
                    async for received in client.messages():
                        topic = received.message.topic
                        if topic == orphan_replies:
                            received.ack()  # who waited for this reply died with the instance
                        elif any(topic_matches(served_filter, topic) for served_filter in served):
                            taken += 1
                            await lane.slots.acquire()
                            handlers.start_soon(handle, received)
                        # else: another role's topic, left unacknowledged for its instance
                except ConnectionLost as error:
                    lost = error
                    reading.cancel_scope.cancel()

            reading.start_soon(read)
            await client.unsubscribe(unsubscribe)
            # Nothing new for a while and nothing in hand: the broker sends what a session
            # holds as handled messages are acknowledged, so a busy handler is no end.
            await wait_quiet(lambda: taken, ADOPTION_QUIET_SECONDS, busy=lambda: finished < taken)
            reading.cancel_scope.cancel()
        if lost is not None:
            raise lost
        return taken
