"""The "msgpack-rpc" equipment driver, and the processor that hands equipment events to the hub.

Commands go out as CloudEvents through the binding (``command_event``); what equipment publishes
comes back through the dispatcher to ``equipment_processor``:

- an event with a ``correlationid`` answers the command with that id -> ``gateway.equipment
  .reply`` (``errorcode`` / ``errormessage`` set: the command failed);
- an event without one is something the equipment reports unasked (a ``pull_event``) ->
  ``gateway.equipment.event``.

The rule needs no memory of sent commands, so a reply is handled even by an instance that did not
send the command, or after a restart (DESIGN section 7: replies are matched on any instance).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gateway.cloudevents import MSGPACK, CloudEvent, utc_now
from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.transport import Processor, Subscription
from gateway_msgpack_rpc.binding import BINDING, MsgpackRpcBinding
from gateway_msgpack_rpc.liveness import Liveness
from gateway_msgpack_rpc.protocol import (
    ACTION_ATTRIBUTE,
    EQUIPMENT_ATTRIBUTE,
    JOB_ORDER_ATTRIBUTE,
)

if TYPE_CHECKING:
    from gateway.equipment import EquipmentHub


class MsgpackRpcDriver:
    """Delivers commands for equipment this instance has (or expects) an RPC connection to."""

    name = BINDING

    def __init__(self, binding: MsgpackRpcBinding, *, source: str) -> None:
        self.binding = binding
        self.source = source

    @property
    def liveness(self) -> Liveness:
        """Online/offline per equipment id (``mark_seen`` / ``mark_gone`` / ``is_online``)."""
        return self.binding.liveness

    def serves(self, command: EquipmentCommand) -> bool:
        return command.equipment is not None and self.binding.knows(command.equipment)

    async def send(self, command: EquipmentCommand) -> None:
        """Write the command to the equipment and return; the reply comes back as an event.

        Offline equipment or a write that fails raises a ``GatewayError`` at once, so the
        engine counts a failed try; a command that was written but never answered is left to
        the engine's timeout. Nothing is ever re-sent here: only the engine sends again (a
        retry with a new correlation id, a recovery after a crash with the same one).
        """
        assert command.equipment is not None  # serves() said so
        await self.binding.publish(command.equipment, command_event(command, self.source))


def command_event(command: EquipmentCommand, source: str) -> CloudEvent:
    """The CloudEvent of a command, shaped like the MQTT equipment driver's (attributes and
    data), so equipment and simulators read both alike. Its ``id`` is the correlation id: a
    command re-sent after a crash is also a CloudEvents duplicate of the first."""
    extensions = {ACTION_ATTRIBUTE: command.action, JOB_ORDER_ATTRIBUTE: command.job_order_id}
    if command.equipment is not None:
        extensions[EQUIPMENT_ATTRIBUTE] = command.equipment
    timeout = command.timeout_seconds
    return CloudEvent(
        type=command.type,
        source=source,
        id=command.correlation_id,
        subject=command.scope,
        time=utc_now(),
        datacontenttype=MSGPACK,
        data={
            "parameters": dict(command.parameters),
            "job_parameters": dict(command.job_parameters),
        },
        correlationid=command.correlation_id,
        expiryinterval=math.ceil(timeout) if timeout else None,  # void once the action gave up
        extensions=extensions,
    )


def equipment_reply(event: CloudEvent) -> EquipmentReply:
    """A reply; ``errorcode`` / ``errormessage`` make it the command's failure."""
    assert event.correlationid is not None
    failed = event.errorcode is not None or event.errormessage is not None
    error = ": ".join(part for part in (event.errorcode, event.errormessage) if part)
    return EquipmentReply(
        correlation_id=event.correlationid,
        data=event.data,
        error=(error or "equipment reported an error") if failed else None,
        scope=event.subject,
    )


def equipment_event(event: CloudEvent) -> EquipmentEvent:
    return EquipmentEvent(
        type=event.type,
        id=event.id,
        equipment=event.extensions.get(EQUIPMENT_ATTRIBUTE),
        scope=event.subject,
        job_order_id=event.extensions.get(JOB_ORDER_ATTRIBUTE),
        data=event.data,
    )


def equipment_processor(hub: EquipmentHub, topic_prefix: str) -> Processor:
    """Takes every event equipment publishes that no more specific processor took."""

    async def handle(event: CloudEvent) -> list[CloudEvent]:
        if event.correlationid is not None:
            await hub.reply(equipment_reply(event))
        else:
            await hub.event(equipment_event(event))
        return []

    return Processor(
        name="msgpack-rpc-equipment",
        subscriptions=[Subscription(f"{topic_prefix}/+/publish", shared=False)],
        handle=handle,
        binding=BINDING,
    )
