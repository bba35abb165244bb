"""Decoding the properties of a received PUBLISH: faster than paho, and as MQTT v5 says.

paho builds a ``Properties`` object for every PUBLISH it reads and fills it one attribute at a
time, each assignment looking the property's name up in a list of all of them: 93 us for the
eight user properties of an equipment reply, about a tenth of the gateway's CPU per step. Every
property a PUBLISH may carry is read here into the same attributes, with paho's checks (lengths
within the packet, one of each single property, values in range, no null in strings); an
identifier a PUBLISH may not carry hands the packet to paho, which refuses it, as it decodes
every other packet type.

One check of paho's is left out on purpose: paho refuses U+FEFF in a string and drops the
connection, but MQTT v5 (1.5.4, MQTT-1.5.4-3) allows it and the broker forwards it. A QoS 1
command holding it would come back on every reconnect of the persistent session and keep the
gateway off the broker for good. Read here, it reaches the CloudEvent decoding, which answers
the sender with an error that names the attribute.

``install`` puts the faster class where paho's PUBLISH decoder (``paho.mqtt._packet``) takes
its ``Properties`` from; the tests compare both decodings property by property.
"""

from __future__ import annotations

from typing import Any

import paho.mqtt._packet as paho_packet
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

USER_PROPERTY = 38
CORRELATION_DATA = 9
SUBSCRIPTION_IDENTIFIER = 11
STRINGS = {3: "ContentType", 8: "ResponseTopic"}
# identifier: (name, width in bytes, least value, greatest value)
INTEGERS = {
    1: ("PayloadFormatIndicator", 1, 0, 1),
    2: ("MessageExpiryInterval", 4, 0, 2**32 - 1),
    35: ("TopicAlias", 2, 1, 2**16 - 1),
}


# The tables paho's ``Properties`` builds in every object (``Properties.__init__``).
_TABLES = frozenset({"types", "names", "properties"})


class PublishProperties(Properties):
    """paho's ``Properties``, reading those of a PUBLISH faster (see the module docstring).

    paho also builds its tables of every property's name, type and packets (three dicts and
    27 list searches) in each object: for every PUBLISH and every PUBACK received, whose
    properties (a PUBACK's are nearly always none) rarely need them. Here they are built the
    first time one of paho's own methods asks for them."""

    def __init__(self, packetType: int) -> None:
        object.__setattr__(self, "packetType", packetType)

    def __getattr__(self, name: str) -> Any:
        if name not in _TABLES:  # a property not set
            raise AttributeError(name)
        Properties.__init__(self, self.packetType)  # type: ignore[no-untyped-call]
        return object.__getattribute__(self, name)

    def unpack(self, buffer: Any) -> tuple[Properties, int]:
        if self.packetType != PacketTypes.PUBLISH:
            return super().unpack(buffer)  # type: ignore[no-any-return,no-untyped-call]
        read = _Reader(bytes(buffer))
        end = read.varint() + read.offset
        if end > len(read.buffer):
            raise MalformedPacket("properties longer than the packet")
        for name in [
            name for name in self.__dict__ if name != "packetType" and name not in _TABLES
        ]:
            object.__delattr__(self, name)  # what paho's clear() does, without its tables
        user_properties: list[tuple[str, str]] = []
        subscriptions: list[int] = []
        while read.offset < end:
            identifier = read.varint()
            if identifier == USER_PROPERTY:
                user_properties.append((read.text(end), read.text(end)))
            elif identifier in STRINGS:
                self._set_once(STRINGS[identifier], read.text(end))
            elif identifier == CORRELATION_DATA:
                self._set_once("CorrelationData", read.binary(end))
            elif identifier in INTEGERS:
                name, width, least, greatest = INTEGERS[identifier]
                self._set_once(name, read.integer(width, least, greatest, end))
            elif identifier == SUBSCRIPTION_IDENTIFIER:
                subscriptions.append(read.varint())
                if not 1 <= subscriptions[-1] <= 268_435_455:
                    raise MalformedPacket("a subscription identifier must be 1-268435455")
            else:  # not a PUBLISH property: paho refuses the packet
                return super().unpack(buffer)  # type: ignore[no-any-return,no-untyped-call]
        if read.offset != end:
            raise MalformedPacket("a property runs past the properties' length")
        if user_properties:
            object.__setattr__(self, "UserProperty", user_properties)
        if subscriptions:
            object.__setattr__(self, "SubscriptionIdentifier", subscriptions)
        return self, end

    def _set_once(self, name: str, value: object) -> None:
        if name in self.__dict__:
            raise MalformedPacket(f"property {name} must not exist more than once")
        object.__setattr__(self, name, value)


class _Reader:
    def __init__(self, buffer: bytes) -> None:
        self.buffer = buffer
        self.offset = 0

    def varint(self) -> int:
        value, shift = 0, 0
        for _ in range(4):
            byte = self.buffer[self.offset]  # IndexError past the end: paho's MalformedPacket
            self.offset += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise MalformedPacket("variable byte integer longer than 4 bytes")

    def binary(self, end: int) -> bytes:
        if self.offset + 2 > end:
            raise MalformedPacket("not enough data to read a length")
        length = int.from_bytes(self.buffer[self.offset : self.offset + 2], "big")
        start = self.offset + 2
        if start + length > end:
            raise MalformedPacket("length delimited data too long")
        self.offset = start + length
        return self.buffer[start : self.offset]

    def integer(self, width: int, least: int, greatest: int, end: int) -> int:
        if self.offset + width > end:
            raise MalformedPacket("not enough data to read an integer")
        value = int.from_bytes(self.buffer[self.offset : self.offset + width], "big")
        self.offset += width
        if not least <= value <= greatest:
            raise MalformedPacket(f"{value} is out of range {least}-{greatest}")
        return value

    def text(self, end: int) -> str:
        text = self.binary(end).decode("utf-8")  # surrogates are refused by the codec
        if "\x00" in text:  # U+FEFF is allowed: see the module docstring
            raise MalformedPacket("null in UTF-8 data")
        return text


class SharedNamesReasonCode(ReasonCode):
    """paho's ``ReasonCode``, sharing its table of names instead of copying it into every
    object (about 60 entries, for each PUBACK received) only to read it."""

    def __init__(self, packetType: int, aName: str = "Success", identifier: int = -1) -> None:
        self.names = type(self).names  # a read-only mapping: paho only reads it
        self.packetType = packetType
        if identifier == -1:
            if packetType == PacketTypes.DISCONNECT and aName == "Success":
                aName = "Normal disconnection"
            self.set(aName)
        else:
            self.value = identifier
            self.getName()  # a bad identifier raises, as paho's


def install() -> None:
    """Make paho decode PUBLISH properties with ``PublishProperties``, and the properties and
    reason codes of the packets it receives without building their tables each (idempotent)."""
    paho_packet.Properties = PublishProperties  # type: ignore[attr-defined]
    paho_packet.ReasonCode = SharedNamesReasonCode  # type: ignore[attr-defined]
