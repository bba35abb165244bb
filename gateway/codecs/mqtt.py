"""CloudEvents binary mode over MQTT v5 (the MicroDCS conventions).

- payload = ``data``, encoded by the codec of ``datacontenttype``
- ``datacontenttype`` -> Content Type property
- ``correlationid`` -> Correlation Data (and a user property)
- ``expiryinterval`` -> Message Expiry Interval
- every other attribute -> a user property named like the attribute
- the reply address is the Response Topic (not an attribute)

``MqttMessage`` is a plain description of one MQTT v5 message, so the mapping itself can be tested
without a client; ``from_client_message`` and ``publish_properties`` convert to and from the
aiomqtt/paho types the MQTT binding and the test clients use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.cloudevents import CloudEvent, attributes_as_text, event_from_attributes
from gateway.codecs.base import decode_data, encode_data
from gateway.errors import CloudEventError

# Attributes carried by dedicated MQTT properties rather than user properties.
_PROPERTY_ATTRIBUTES = ("datacontenttype", "expiryinterval")
_MAX_USER_PROPERTIES = 64


@dataclass(frozen=True, kw_only=True)
class MqttMessage:
    topic: str
    payload: bytes = b""
    qos: int = 1
    retain: bool = False
    content_type: str | None = None
    correlation_data: bytes | None = None
    response_topic: str | None = None
    message_expiry_interval: int | None = None
    user_properties: Sequence[tuple[str, str]] = field(default_factory=tuple)


def to_mqtt(
    event: CloudEvent,
    topic: str,
    *,
    response_topic: str | None = None,
    qos: int = 1,
    retain: bool = False,
) -> MqttMessage:
    """The MQTT v5 message carrying ``event`` in binary mode."""
    event.validate()
    content_type = event.datacontenttype
    if content_type is None and event.data is not None and not isinstance(event.data, bytes):
        content_type = "application/json"
    attributes = attributes_as_text(event)
    for name in _PROPERTY_ATTRIBUTES:
        attributes.pop(name, None)
    return MqttMessage(
        topic=topic,
        payload=encode_data(event.data, content_type),
        qos=qos,
        retain=retain,
        content_type=content_type,
        correlation_data=event.correlationid.encode() if event.correlationid else None,
        response_topic=response_topic,
        message_expiry_interval=event.expiryinterval,
        user_properties=tuple(attributes.items()),
    )


def from_mqtt(message: MqttMessage) -> CloudEvent:
    """The CloudEvent an MQTT v5 message carries; ``CloudEventError`` names what is wrong."""
    attributes = _user_attributes(message.user_properties)
    correlation = _correlation_text(message.correlation_data)
    if correlation is not None and "correlationid" not in attributes:
        attributes["correlationid"] = correlation
    if message.message_expiry_interval is not None:
        attributes["expiryinterval"] = str(message.message_expiry_interval)
    content_type = message.content_type
    if content_type is not None:
        attributes["datacontenttype"] = content_type
    data: Any = decode_data(bytes(message.payload), content_type)
    return event_from_attributes(attributes, data)


def _user_attributes(properties: Sequence[tuple[str, str]]) -> dict[str, str]:
    if len(properties) > _MAX_USER_PROPERTIES:
        raise CloudEventError("user properties", f"more than {_MAX_USER_PROPERTIES}")
    attributes: dict[str, str] = {}
    for pair in properties:
        if len(pair) != 2 or not all(isinstance(part, str) for part in pair):
            raise CloudEventError("user properties", "must be pairs of strings")
        name, value = pair
        if name in attributes:
            raise CloudEventError(name[:40], "appears more than once")
        if name in _PROPERTY_ATTRIBUTES:
            raise CloudEventError(name, "must travel in its MQTT property, not a user property")
        attributes[name] = value
    return attributes


def _correlation_text(data: bytes | None) -> str | None:
    """Correlation Data as the ``correlationid`` attribute, when it is text.

    Binary Correlation Data is legal MQTT; such a request has no ``correlationid`` but its
    reply still echoes the bytes (the binding copies them from the request).
    """
    if not data:
        return None
    try:
        return bytes(data).decode()
    except UnicodeDecodeError:
        return None


def correlation_of(message: MqttMessage) -> bytes | None:
    """The Correlation Data a reply must echo, even when the request itself was malformed."""
    if message.correlation_data is not None:
        return bytes(message.correlation_data)
    for name, value in message.user_properties:
        if name == "correlationid" and isinstance(value, str):
            return value.encode()
    return None


def from_client_message(message: aiomqtt.Message) -> MqttMessage:
    """The neutral description of a message aiomqtt received."""
    properties = message.properties
    return MqttMessage(
        topic=message.topic.value,
        payload=bytes(message.payload),
        qos=message.qos,
        retain=message.retain,
        content_type=_property(properties, "ContentType"),
        correlation_data=_property(properties, "CorrelationData"),
        response_topic=_property(properties, "ResponseTopic"),
        message_expiry_interval=_property(properties, "MessageExpiryInterval"),
        user_properties=tuple(_property(properties, "UserProperty") or ()),
    )


def _property(properties: Properties | None, name: str) -> Any:
    return getattr(properties, name, None) if properties is not None else None


class PackedProperties(Properties):
    """PUBLISH properties packed once, here, rather than by paho.

    paho's ``Properties`` checks every assignment against its tables and builds those tables
    for each object, and its ``pack`` searches them again: several times the cost of sending
    the message. This one holds the packed bytes (MQTT v5 section 2.2.2), which is all paho
    asks of a PUBLISH's properties.
    """

    _packed: bytes
    _description: str

    def __init__(self, packed: bytes, description: str) -> None:  # no super(): no tables
        object.__setattr__(self, "packetType", PacketTypes.PUBLISH)
        object.__setattr__(self, "_packed", packed)
        object.__setattr__(self, "_description", description)

    def pack(self) -> bytes:
        return self._packed

    def __str__(self) -> str:
        return self._description

    __repr__ = __str__


# MQTT v5 property identifiers of a PUBLISH (each fits the one-byte variable integer).
_MESSAGE_EXPIRY_INTERVAL = b"\x02"
_CONTENT_TYPE = b"\x03"
_RESPONSE_TOPIC = b"\x08"
_CORRELATION_DATA = b"\x09"
_USER_PROPERTY = b"\x26"


def _binary(value: bytes) -> bytes:
    if len(value) > 0xFFFF:
        raise CloudEventError("MQTT property", "longer than 65535 bytes")
    return len(value).to_bytes(2, "big") + value


def _text(value: str) -> bytes:
    return _binary(value.encode())


# Packed user property names (identifier and name), by name: the attribute names of the
# events the gateway sends, a handful, the same on every message.
_PACKED_NAMES: dict[str, bytes] = {}
_PACKED_NAMES_KEPT = 256


def _user_property_name(name: str) -> bytes:
    packed = _PACKED_NAMES.get(name)
    if packed is None:
        packed = _USER_PROPERTY + _text(name)
        if len(_PACKED_NAMES) < _PACKED_NAMES_KEPT:
            _PACKED_NAMES[name] = packed
    return packed


def _variable_integer(value: int) -> bytes:
    encoded = bytearray()
    while True:
        byte, value = value % 128, value // 128
        encoded.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(encoded)


def publish_properties(message: MqttMessage) -> Properties:
    """The paho PUBLISH properties for ``message`` (packed here: see ``PackedProperties``)."""
    parts: list[bytes] = []
    if message.message_expiry_interval is not None:
        parts += (_MESSAGE_EXPIRY_INTERVAL, message.message_expiry_interval.to_bytes(4, "big"))
    if message.content_type:
        parts += (_CONTENT_TYPE, _text(message.content_type))
    if message.response_topic:
        parts += (_RESPONSE_TOPIC, _text(message.response_topic))
    if message.correlation_data is not None:
        parts += (_CORRELATION_DATA, _binary(message.correlation_data))
    for name, value in message.user_properties:
        parts += (_user_property_name(name), _text(value))
    body = b"".join(parts)
    description = f"[{len(message.user_properties)} user properties, {len(body)} bytes]"
    return PackedProperties(_variable_integer(len(body)) + body, description)


async def publish(client: aiomqtt.Client, message: MqttMessage) -> None:
    """Publish ``message`` with ``client`` (waits for the PUBACK at QoS 1)."""
    await client.publish(
        message.topic,
        message.payload,
        qos=message.qos,
        retain=message.retain,
        properties=publish_properties(message),
    )
