"""The MQTT equipment driver: the base an integrator's driver plugin shapes payloads on.

The driver publishes each ``push_command`` to the equipment's command topic and receives
replies, events and heartbeats through processors on the gateway's MQTT binding (shared
subscriptions, de-duplication, acknowledgement after handling), so whichever instance receives
a reply hands it to the engine. Topic and attribute conventions: ``gateway_mqtt_equipment.
conventions``. A subclass changes what travels, not how:

- ``payload_for(command)``: the command event's ``data``;
- ``read_reply(event)``: ``(data, error)`` from a reply event;
- ``read_event(event)``: the ``EquipmentEvent`` for a ``pull_event`` (``None``: ignore it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

from gateway.cloudevents import CloudEvent
from gateway.equipment import (
    EquipmentCommand,
    EquipmentEvent,
    command_event,
    command_payload,
    event_from_cloudevent,
    reply_error,
    reply_from_event,
)
from gateway.errors import GatewayError, NotPermitted, ValidationError
from gateway.store import KnownScopes
from gateway.transport import MQTT_BINDING, Processor, Redelivery, Subscription, arrival_topic
from gateway_mqtt_equipment.conventions import (
    EQUIPMENT,
    HEARTBEAT_TYPE,
    OFFLINE_TYPE,
    WILDCARD,
    EquipmentTopics,
    check_topic_level,
    check_topic_prefix,
)
from gateway_mqtt_equipment.settings import MqttEquipmentSettings

if TYPE_CHECKING:
    from gateway.phases import DriverPhase

log = logging.getLogger(__name__)

# Equipment's replies, events and heartbeats answer nothing: whatever Response Topic one names
# (another equipment's command topic, a retained MES topic), the gateway publishes nothing there.
NO_REPLIES: tuple[str, ...] = ()


class MqttEquipmentDriver:
    """Delivers commands to equipment over MQTT; ``gateway.equipment.EquipmentDriver``.

    ``equipment`` lists the equipment names served; ``*`` serves any equipment no specific
    driver serves (``catch_all``). ``heartbeat_timeout_seconds`` 0: the equipment sends no
    heartbeats (liveness is not tracked).
    """

    def __init__(
        self,
        gateway: DriverPhase,
        *,
        name: str = "mqtt-equipment",
        topic_prefix: str = "equipment",
        equipment: Iterable[str] = (WILDCARD,),
        heartbeat_timeout_seconds: float = 10.0,
        binding: str = MQTT_BINDING,
    ) -> None:
        names = list(equipment)
        self.gateway = gateway
        self._scopes = KnownScopes(lambda: gateway.store)  # a scope equipment names must exist
        self.name = name
        self.topics = EquipmentTopics(check_topic_prefix("topic_prefix", topic_prefix))
        self.catch_all = WILDCARD in names
        self.equipment = frozenset(
            check_topic_level("equipment", item) for item in names if item != WILDCARD
        )
        self.heartbeat_timeout_seconds = heartbeat_timeout_seconds
        self.binding = binding
        self._receiving = False

    @classmethod
    def from_settings(
        cls, gateway: DriverPhase, settings: MqttEquipmentSettings, *, name: str = "mqtt-equipment"
    ) -> Self:
        return cls(
            gateway,
            name=name,
            topic_prefix=settings.topic_prefix,
            equipment=settings.equipment,
            heartbeat_timeout_seconds=settings.heartbeat_timeout_seconds,
        )

    # -- what a subclass shapes ---------------------------------------------------------------

    def payload_for(self, command: EquipmentCommand) -> Any:
        """The command event's ``data``: the action's and the job's parameters."""
        return command_payload(command)

    def read_reply(self, event: CloudEvent) -> tuple[Any, str | None]:
        """``(data, error)`` of a reply; an ``errorcode``/``errormessage`` makes it an error."""
        return event.data, reply_error(event)

    def read_event(self, event: CloudEvent) -> EquipmentEvent | None:
        """The ``pull_event`` an equipment event carries (``None``: not one for recipes)."""
        return event_from_cloudevent(event)

    # -- the driver -----------------------------------------------------------------------------

    def serves(self, command: EquipmentCommand) -> bool:
        if command.equipment is None:
            return False
        return self.catch_all or command.equipment in self.equipment

    def expects_heartbeats(self, equipment_id: str) -> bool:
        """``gateway.equipment.LivenessTracking``: heartbeats are expected from what it serves."""
        if self.heartbeat_timeout_seconds <= 0:
            return False
        return self.catch_all or equipment_id in self.equipment

    def command_event(self, command: EquipmentCommand) -> CloudEvent:
        """The CloudEvent that carries ``command`` to the equipment (``payload_for`` as data)."""
        return command_event(command, self.gateway.source, data=self.payload_for(command))

    async def send(self, command: EquipmentCommand) -> None:
        """Publish ``command`` to its equipment's command topic, with the equipment's replies
        topic as its Response Topic; ``GatewayError`` when it cannot be sent (not connected...)."""
        if command.equipment is None:
            raise GatewayError(f"{self.name}: command {command.correlation_id} names no equipment")
        self._check_receiving()
        try:
            equipment = check_topic_level("equipment", command.equipment)
            topic = self.topics.commands(equipment)
            event = self.command_event(command)
            await self.gateway.binding(self.binding).publish(
                topic, event, qos=1, response_topic=self.topics.replies(equipment)
            )
        except (ValueError, GatewayError) as error:
            raise GatewayError(
                f"{self.name}: command {command.correlation_id} not sent: {error}"
            ) from error
        log.debug("%s: sent %s to %s", self.name, command.correlation_id, topic)

    # -- what comes back ------------------------------------------------------------------------

    def _check_receiving(self) -> None:
        """Refuse to send when no processor would receive the reply (a clear error, not a
        timeout): the ``mqtt-equipment`` plugin registers the processors of every driver."""
        if not self._receiving:
            raise GatewayError(
                f"{self.name}: no processor receives the replies "
                "(the mqtt-equipment plugin registers them: is it blocked?)"
            )

    def processors(self) -> list[Processor]:
        """The processors that receive replies, events and heartbeats (any instance).

        Whoever asks registers them (the ``mqtt-equipment`` plugin does, for every driver):
        from then on the driver sends commands.
        """
        self._receiving = True
        served = ["+"] if self.catch_all else sorted(self.equipment)
        # Wherever a recipe engine runs (role gateway, or engine alone) equipment messages are
        # applied where they arrive.
        roles = frozenset({"gateway", "engine"})
        processors = [
            Processor(
                name=f"{self.name}-replies",
                subscriptions=[
                    Subscription(self.topics.replies(item), reply_to=NO_REPLIES) for item in served
                ],
                handle=self._on_reply,
                admit=self._admit,
                binding=self.binding,
                roles=roles,
                # The engine commits a reply only while its attempt is outstanding, so a
                # redelivered reply changes nothing: no de-duplication claim needed.
                redelivery=Redelivery.IDEMPOTENT,
            ),
            Processor(
                name=f"{self.name}-events",
                subscriptions=[
                    Subscription(self.topics.events(item), reply_to=NO_REPLIES) for item in served
                ],
                handle=self._on_event,
                admit=self._admit,
                binding=self.binding,
                roles=roles,
            ),
        ]
        if self.heartbeat_timeout_seconds > 0:
            processors.append(
                Processor(
                    name=f"{self.name}-heartbeats",
                    subscriptions=[
                        Subscription(self.topics.heartbeat(item), qos=0, reply_to=NO_REPLIES)
                        for item in served
                    ],
                    handle=self._on_heartbeat,
                    event_types=frozenset({HEARTBEAT_TYPE, OFFLINE_TYPE}),
                    binding=self.binding,
                    roles=roles,
                    # Repeated by nature (one a second per device) and idempotent (online
                    # until..., offline since...): a marker each would fill the store.
                    redelivery=Redelivery.IDEMPOTENT,
                )
            )
        return processors

    def _sender(self, event: CloudEvent) -> str:
        """The equipment that sent ``event``: the one whose topic it arrived on (the broker's
        ACL vouches for that). An ``equipment`` attribute naming other equipment is refused."""
        topic = arrival_topic()
        sender = self.topics.sender(topic)
        if sender is None:
            raise ValidationError("topic", f"{topic!r} is not an equipment topic of {self.name}")
        claimed = event.extensions.get(EQUIPMENT)
        if claimed is not None and claimed != sender:
            raise NotPermitted(f"equipment {sender} may not speak for equipment {claimed}")
        return sender

    async def _admit(self, event: CloudEvent) -> None:
        """Equipment names no scope the MES has not made (before anything is stored)."""
        await self._scopes.check(event.subject)

    async def _on_reply(self, event: CloudEvent) -> Sequence[CloudEvent]:
        sender = self._sender(event)
        reply = reply_from_event(event)  # ValidationError without a correlation id
        data, error = self.read_reply(event)
        await self.gateway.equipment.reply(replace(reply, data=data, error=error, equipment=sender))
        return []

    async def _on_event(self, event: CloudEvent) -> Sequence[CloudEvent]:
        sender = self._sender(event)
        equipment_event = self.read_event(event)
        if equipment_event is not None:
            await self.gateway.equipment.event(replace(equipment_event, equipment=sender))
        return []

    async def _on_heartbeat(self, event: CloudEvent) -> Sequence[CloudEvent]:
        equipment = self._sender(event)
        if event.type == OFFLINE_TYPE:
            detail = event.data.get("reason") if isinstance(event.data, dict) else None
            reason = f"disconnected ({detail})" if detail else "disconnected"
            log.info("%s: equipment %s %s", self.name, equipment, reason)
            await self.gateway.equipment.gone(equipment, str(reason))
        else:
            await self.gateway.equipment.heartbeat(
                equipment, timeout_seconds=self.heartbeat_timeout_seconds
            )
        return []
