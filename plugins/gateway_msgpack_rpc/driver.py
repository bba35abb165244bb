"""The "msgpack-rpc" equipment driver, and the processor that hands equipment events to the hub.

Commands go out as CloudEvents through the binding, shaped like every equipment driver's
(``gateway.equipment.command_event``); what equipment publishes comes back through the
dispatcher to ``equipment_processor``:

- an event with a ``correlationid`` answers the command with that id -> ``gateway.equipment
  .reply`` (``errorcode`` / ``errormessage`` set: the command failed; ``reply_from_event``);
- an event without one is something the equipment reports unasked (a ``pull_event``) ->
  ``gateway.equipment.event`` (``event_from_cloudevent``).

The rule needs no memory of this instance, so a reply is handled even by an instance that did
not send the command, or after a restart. A reply carries the connection's equipment as its
sender, and the hub accepts it only for a command sent to that equipment.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.cloudevents import MSGPACK, CloudEvent
from gateway.equipment import (
    EQUIPMENT_ATTRIBUTE,
    EquipmentCommand,
    command_event,
    event_from_cloudevent,
    reply_from_event,
)
from gateway.store import KnownScopes
from gateway.transport import Processor, Subscription
from gateway_msgpack_rpc.binding import BINDING, EquipmentOffline, MsgpackRpcBinding
from gateway_msgpack_rpc.forwarding import Forwarding
from gateway_msgpack_rpc.liveness import Liveness

if TYPE_CHECKING:
    from gateway.equipment import EquipmentHub
    from gateway.phases import DriverPhase


class MsgpackRpcDriver:
    """Delivers commands for equipment this instance has (or expects) an RPC connection to.

    ``gateway.equipment.LivenessTracking``: the equipment it knows (configured equipment
    servers, ``known_equipment``, and any seen since start) is expected to be connected, so
    the hub reports it as "never seen" rather than untracked before it first connects.
    """

    name = BINDING

    def __init__(
        self,
        binding: MsgpackRpcBinding,
        *,
        source: str,
        hub: EquipmentHub | None = None,
        gateway: DriverPhase | None = None,
    ) -> None:
        """``gateway``: forward commands for equipment connected to another instance through
        its store (``forwarding``); its equipment hub is then the ``hub``."""
        self.binding = binding
        self.source = source
        self.hub = gateway.equipment if gateway is not None else hub
        # For equipment connected to another instance (None: commands go out here only).
        self.forwarding = Forwarding(gateway, self.send_here) if gateway is not None else None

    @property
    def liveness(self) -> Liveness:
        """This instance's view (``is_online`` / ``status``); the hub has every instance's."""
        return self.binding.liveness

    def serves(self, command: EquipmentCommand) -> bool:
        equipment = command.equipment
        if equipment is None:
            return False
        elsewhere = self.forwarding is not None and self.forwarding.owner_of(equipment)
        return self.binding.knows(equipment) or bool(elsewhere)

    def expects_heartbeats(self, equipment_id: str) -> bool:
        return self.binding.knows(equipment_id)

    async def send(self, command: EquipmentCommand) -> None:
        """Write the command to the equipment and return; the reply comes back as an event.

        Offline equipment or a write that fails raises a ``GatewayError`` at once, so the
        engine counts a failed try; a command that was written but never answered is left to
        the engine's timeout. Nothing is ever re-sent here: only the engine sends again (a
        retry with a new correlation id, a recovery after a crash with the same one).
        """
        assert command.equipment is not None  # serves() said so
        owner = self.forwarding.owner_of(command.equipment) if self.forwarding else None
        if owner is not None and not self.binding.is_connected(command.equipment):
            assert self.forwarding is not None
            await self.forwarding.forward(owner, command)
            return
        await self.send_here(command)

    async def send_here(self, command: EquipmentCommand) -> None:
        """Write ``command`` on this instance's connection to its equipment."""
        assert command.equipment is not None
        # The command's id is its correlation id: a command re-sent after a crash is also a
        # CloudEvents duplicate of the first.
        event = command_event(
            command, self.source, datacontenttype=MSGPACK, id=command.correlation_id
        )
        try:
            await self.binding.publish(command.equipment, event)
        except EquipmentOffline:
            if await self._online_elsewhere(command.equipment):
                raise EquipmentOffline(
                    f"equipment {command.equipment} has no MessagePack-RPC connection to this "
                    "gateway instance (it is connected to another one)"
                ) from None
            raise

    async def _online_elsewhere(self, equipment_id: str) -> bool:
        """Whether the hub (every instance's view) has ``equipment_id`` online although this
        instance has no connection to it; ``False`` when the hub cannot tell."""
        if self.hub is None:
            return False
        try:
            return (await self.hub.liveness(equipment_id)).online
        except Exception:  # the store is down: the binding's own reason is still true
            return False


def equipment_processor(
    hub: EquipmentHub, topic_prefix: str, scopes: KnownScopes | None = None
) -> Processor:
    """Takes every event equipment publishes that no more specific processor took; one
    naming a scope ``scopes`` does not know is refused."""

    async def admit(event: CloudEvent) -> None:
        if scopes is not None:
            await scopes.check(event.subject)

    async def handle(event: CloudEvent) -> list[CloudEvent]:
        if is_reply(event):
            # The binding set the extension from the connection: who really answered.
            sender = event.extensions.get(EQUIPMENT_ATTRIBUTE)
            await hub.reply(replace(reply_from_event(event), equipment=sender))
        else:
            await hub.event(event_from_cloudevent(event))
        return []

    return Processor(
        name="msgpack-rpc-equipment",
        subscriptions=[Subscription(f"{topic_prefix}/+/publish", shared=False)],
        handle=handle,
        admit=admit,
        binding=BINDING,
        # A reply is committed only while the try it answers is outstanding (the engine's
        # compare-and-swap checks the attempt), so a second delivery changes nothing: no
        # de-duplication marker for it. An event (no ``correlationid``) is still claimed.
        idempotent_when=is_reply,
    )


def is_reply(event: CloudEvent) -> bool:
    """Whether ``event`` answers a command (it names the command's ``correlationid``)."""
    return event.correlationid is not None
