"""``gateway_mqtt.decoding`` reads PUBLISH properties as paho does, property by property, except
that it accepts U+FEFF in strings, as MQTT v5 does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt._packet import DECODE_ERRORS
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from gateway_mqtt.decoding import PublishProperties, SharedNamesReasonCode

NAMES = (
    "UserProperty",
    "ContentType",
    "ResponseTopic",
    "CorrelationData",
    "MessageExpiryInterval",
    "SubscriptionIdentifier",
    "PayloadFormatIndicator",
    "TopicAlias",
)
# paho refuses U+FEFF: the comparison leaves it out, test_u_feff_is_read_as_mqtt_allows covers it
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00\ufeff"))


def packed(**values: Any) -> bytes:
    """The properties as a sender packs them (paho's own encoder)."""
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(properties, name, value)
    return bytes(properties.pack())  # type: ignore[no-untyped-call]


def decoded(kind: type[Properties], buffer: bytes) -> tuple[dict[str, Any], int]:
    properties, length = kind(PacketTypes.PUBLISH).unpack(buffer)  # type: ignore[no-untyped-call]
    return {name: getattr(properties, name) for name in NAMES if hasattr(properties, name)}, length


@given(
    users=st.lists(st.tuples(TEXT, TEXT), max_size=12),
    content_type=st.none() | TEXT,
    response_topic=st.none() | TEXT.filter(bool),
    correlation=st.none() | st.binary(max_size=64),
    expiry=st.none() | st.integers(0, 2**32 - 1),
    subscriptions=st.none() | st.lists(st.integers(1, 2**28 - 1), min_size=1, max_size=2),
    payload_format=st.none() | st.integers(0, 1),
    topic_alias=st.none() | st.integers(1, 2**16 - 1),
    payload=st.binary(max_size=16),
)
def test_the_properties_read_are_the_ones_paho_reads(
    users: list[tuple[str, str]],
    content_type: str | None,
    response_topic: str | None,
    correlation: bytes | None,
    expiry: int | None,
    subscriptions: list[int] | None,
    payload_format: int | None,
    topic_alias: int | None,
    payload: bytes,
) -> None:
    values: dict[str, Any] = {"UserProperty": users} if users else {}
    for name, value in (
        ("ContentType", content_type),
        ("ResponseTopic", response_topic),
        ("CorrelationData", correlation),
        ("MessageExpiryInterval", expiry),
        ("SubscriptionIdentifier", subscriptions),
        ("PayloadFormatIndicator", payload_format),
        ("TopicAlias", topic_alias),
    ):
        if value is not None:
            values[name] = value
    buffer = packed(**values) + payload  # the payload follows the properties
    assert decoded(PublishProperties, buffer) == decoded(Properties, buffer)


def test_what_paho_refuses_is_refused() -> None:
    whole = packed(ContentType="application/json", UserProperty=[("id", "e1")])
    twice = packed(ContentType="a")[1:] * 2
    malformed = [
        whole[:-3],  # cut short
        bytes([len(twice)]) + twice,  # ContentType twice
        packed(UserProperty=[("k", "v")]).replace(b"v", b"\x00"),  # null in a string
        b"\xff\xff\xff\xff\x01",  # a length of more than four bytes
        bytes([3, 35, 0, 0]),  # TopicAlias 0
        bytes([2, 1, 2]),  # PayloadFormatIndicator 2
        bytes([2, 11, 0]),  # SubscriptionIdentifier 0
        bytes([5, 17, 0, 0, 0, 1]),  # SessionExpiryInterval: not a PUBLISH property
        bytes([4, 2, 0, 0, 1]),  # MessageExpiryInterval cut short
    ]
    for buffer in malformed:
        for kind in (Properties, PublishProperties):
            with pytest.raises(DECODE_ERRORS):
                kind(PacketTypes.PUBLISH).unpack(buffer)  # type: ignore[no-untyped-call]


def test_u_feff_is_read_as_mqtt_allows() -> None:
    """MQTT-1.5.4-3: U+FEFF is a character like any other; paho alone drops the connection."""
    buffer = packed(UserProperty=[("id", "a\ufeffb")], ContentType="\ufeff")
    with pytest.raises(DECODE_ERRORS):
        Properties(PacketTypes.PUBLISH).unpack(buffer)  # type: ignore[no-untyped-call]
    read, _ = decoded(PublishProperties, buffer)
    assert read == {"UserProperty": [("id", "a\ufeffb")], "ContentType": "\ufeff"}


def test_paho_decodes_publish_packets_with_it() -> None:
    import paho.mqtt._packet as paho_packet

    import gateway_mqtt.client  # noqa: F401  (installs it)

    assert vars(paho_packet)["Properties"] is PublishProperties


def test_properties_without_their_tables_still_do_all_pahos_do() -> None:
    # A PUBACK's properties (nearly always none): paho's methods still find their tables.
    puback = PublishProperties(PacketTypes.PUBACK)
    assert puback.isEmpty()  # type: ignore[no-untyped-call]
    assert not hasattr(puback, "ReasonString")
    assert str(puback) == str(Properties(PacketTypes.PUBACK))  # type: ignore[no-untyped-call]
    puback.ReasonString = "fine"
    assert puback.json() == {"ReasonString": "fine"}  # type: ignore[no-untyped-call]
    # A PUBLISH's, read again into the same object, keeps only what it read last.
    publish = PublishProperties(PacketTypes.PUBLISH)
    publish.unpack(packed(ContentType="a", MessageExpiryInterval=5))
    publish.unpack(packed(ContentType="b"))
    assert decoded_attributes(publish) == {"ContentType": "b"}


def decoded_attributes(properties: Properties) -> dict[str, Any]:
    return {name: getattr(properties, name) for name in NAMES if hasattr(properties, name)}


@pytest.mark.parametrize(
    ("packet", "name", "identifier"),
    [
        (PacketTypes.PUBACK, "Success", -1),
        (PacketTypes.DISCONNECT, "Success", -1),  # paho's "Normal disconnection"
        (PacketTypes.PUBACK, "", 0x87),
        (PacketTypes.PUBACK, "", 0x10),
    ],
)
def test_a_reason_code_sharing_its_names_is_the_one_paho_makes(
    packet: int, name: str, identifier: int
) -> None:
    ours = SharedNamesReasonCode(packet, name or "Success", identifier)
    pahos = ReasonCode(packet, name or "Success", identifier)
    assert (ours.value, str(ours), ours.is_failure) == (pahos.value, str(pahos), pahos.is_failure)
    assert ours == pahos


def test_a_reason_code_of_no_such_identifier_is_refused_as_paho_refuses_it() -> None:
    with pytest.raises(KeyError):
        ReasonCode(PacketTypes.PUBACK, identifier=0x42)
    with pytest.raises(KeyError):
        SharedNamesReasonCode(PacketTypes.PUBACK, identifier=0x42)
