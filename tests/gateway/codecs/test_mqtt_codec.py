"""CloudEvents binary mode over MQTT v5: round trips of any valid event, and robustness.

Whatever arrives on the wire, ``from_mqtt`` returns a valid ``CloudEvent`` or raises
``CloudEventError``; nothing else may escape to the message loop.
"""

from __future__ import annotations

import json
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import aiomqtt
import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as note_outcome
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gateway.cloudevents import (
    CONFIG_METHODS,
    JSON,
    KNOWN_ATTRIBUTES,
    MSGPACK,
    CloudEvent,
    format_time,
)
from gateway.codecs.mqtt import (
    MqttMessage,
    correlation_of,
    from_client_message,
    from_mqtt,
    publish_properties,
    to_mqtt,
)
from gateway.errors import CloudEventError

# A valid header: the attributes every event must carry.
CORE = [("specversion", "1.0"), ("id", "1"), ("source", "urn:x"), ("type", "com.example.t")]

# -- strategies for valid events -------------------------------------------------------------

# MQTT strings must not contain U+0000 (MQTT-1.5.4-2), and paho refuses U+FEFF: see
# test_attribute_text_mqtt_cannot_carry_is_refused_by_name.
mqtt_text = st.characters(codec="utf-8", exclude_characters="\x00\ufeff")
short_text = st.text(mqtt_text, max_size=30)
required_text = st.text(mqtt_text, min_size=1, max_size=30)
fixed_offsets = st.integers(min_value=-(24 * 60) + 1, max_value=24 * 60 - 1).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
aware_datetimes = st.datetimes(timezones=fixed_offsets | st.just(UTC))
hex_digits = "0123456789abcdef"
traceparents = st.builds(
    lambda *parts: "-".join(parts),
    st.text(hex_digits, min_size=2, max_size=2),
    st.text(hex_digits, min_size=32, max_size=32),
    st.text(hex_digits, min_size=16, max_size=16),
    st.text(hex_digits, min_size=2, max_size=2),
)
extension_names = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=20).filter(
    lambda name: name not in KNOWN_ATTRIBUTES and name != "data"
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=15,
)
msgpack_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
msgpack_containers = st.recursive(
    msgpack_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=15,
)
# Top-level bytes are covered by test_msgpack_bytes_data_round_trips below.
msgpack_values = msgpack_containers.filter(lambda value: not isinstance(value, bytes))

# (datacontenttype, data): data the content type's codec carries, or raw bytes for the others.
# A raw payload must not be empty: an empty payload means "no data".
content_and_data = st.one_of(
    st.tuples(
        st.sampled_from(
            [JSON, "application/json; charset=utf-8", "application/cloudevents+json", None]
        ),
        json_values,
    ),
    st.tuples(st.sampled_from([MSGPACK, "application/x-msgpack"]), msgpack_values),
    st.tuples(
        st.sampled_from(["application/octet-stream", "text/plain", "image/png"]),
        st.none() | st.binary(min_size=1, max_size=100),
    ),
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


@st.composite
def valid_events(draw: st.DrawFn) -> CloudEvent:
    content_type, data = draw(content_and_data)
    event = CloudEvent(
        id=draw(required_text),
        source=draw(required_text),
        type=draw(required_text),
        subject=draw(optional(required_text)),
        time=draw(optional(aware_datetimes)),
        datacontenttype=content_type,
        dataschema=draw(optional(required_text)),
        data=data,
        correlationid=draw(optional(short_text)),
        causationid=draw(optional(short_text)),
        expiryinterval=draw(optional(st.integers(min_value=0, max_value=0xFFFF_FFFF))),
        expirytime=draw(optional(aware_datetimes)),
        method=draw(optional(st.sampled_from(CONFIG_METHODS))),
        traceparent=draw(optional(traceparents)),
        tracestate=draw(optional(short_text)),
        errorcode=draw(optional(short_text)),
        errormessage=draw(optional(short_text)),
        extensions=draw(st.dictionaries(extension_names, short_text, max_size=4)),
    )
    return event.validate()


def normalised(event: CloudEvent) -> CloudEvent:
    """What a receiver sees: data without a content type travels as JSON."""
    if event.datacontenttype is None and event.data is not None:
        return event.replace(datacontenttype=JSON)
    return event


# -- round trips -----------------------------------------------------------------------------


@settings(max_examples=300)
@given(valid_events(), st.none() | st.text(min_size=1, max_size=20))
def test_any_valid_event_round_trips(event: CloudEvent, response_topic: str | None) -> None:
    message = to_mqtt(event, "gw/station-1/commands", response_topic=response_topic)
    assert message.topic == "gw/station-1/commands"
    assert message.response_topic == response_topic
    received = from_mqtt(message)
    assert received == normalised(event)
    # Equal datetimes may differ in their zone; the wire text says the same instant.
    for name in ("time", "expirytime"):
        sent, got = getattr(event, name), getattr(received, name)
        assert (sent is None) == (got is None)
        if sent is not None:
            assert got.utcoffset() == sent.utcoffset()


@settings(max_examples=200)
@given(valid_events())
def test_mqtt_properties_carry_the_mapped_attributes(event: CloudEvent) -> None:
    message = to_mqtt(event, "t")
    names = [name for name, _ in message.user_properties]
    assert len(names) == len(set(names))
    assert "datacontenttype" not in names
    assert "expiryinterval" not in names
    assert "data" not in names
    assert message.content_type == normalised(event).datacontenttype
    assert message.message_expiry_interval == event.expiryinterval
    if event.correlationid:
        assert message.correlation_data == event.correlationid.encode()
        assert correlation_of(message) == event.correlationid.encode()
    properties = dict(message.user_properties)
    for name in ("id", "source", "type", "specversion"):
        assert properties[name] == getattr(event, name)
    if event.time is not None:
        assert properties["time"] == format_time(event.time)


def over_the_wire(message: MqttMessage) -> MqttMessage:
    """``message`` as a receiver sees it: PUBLISH properties encoded and decoded by paho."""
    received = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    received.unpack(publish_properties(message).pack())  # type: ignore[no-untyped-call]
    return from_client_message(
        aiomqtt.Message(message.topic, message.payload, message.qos, message.retain, 1, received)
    )


@settings(max_examples=200)
@given(valid_events())
def test_any_valid_event_survives_the_mqtt_property_encoding(event: CloudEvent) -> None:
    message = to_mqtt(event, "gw/station-1/commands", response_topic="mes/replies/7")
    received = over_the_wire(message)
    assert received.response_topic == "mes/replies/7"
    assert received.correlation_data == message.correlation_data
    assert from_mqtt(received) == normalised(event)


def test_an_empty_content_type_is_refused_or_survives_the_wire() -> None:
    event = CloudEvent(type="t", source="s", datacontenttype="", data=b"\x80raw")
    refused: CloudEventError | None = None
    try:
        message = to_mqtt(event, "t")
    except CloudEventError as error:
        refused = error
    if refused is not None:
        assert refused.element == "datacontenttype"
    else:
        assert from_mqtt(over_the_wire(message)) == event


@pytest.mark.parametrize(
    "changes",
    [
        {"subject": "station\x001"},
        {"id": "\x00"},
        {"errormessage": "bad name '\x00'"},
        {"extensions": {"note": "a\x00b"}},
        {"extensions": {"note": "\ud800"}},
        {"causationid": "x\udfff"},
        {"errormessage": "\ufeff"},
        {"extensions": {"note": "a\ufeffb"}},
    ],
    ids=[
        "nul-subject",
        "nul-id",
        "nul-errormessage",
        "nul-extension",
        "surrogate",
        "surrogate-2",
        "bom-errormessage",
        "bom-extension",
    ],
)
def test_attribute_text_mqtt_cannot_carry_is_refused_by_name(changes: dict[str, Any]) -> None:
    """U+0000 is forbidden in MQTT strings (a broker drops the connection), surrogates are not
    UTF-8, U+FEFF makes paho refuse the packet (and drop the connection): such an event must be
    refused with a ``CloudEventError``, never reach the client."""
    event = CloudEvent(type="t", source="s", **changes)
    element = next(iter(changes["extensions"])) if "extensions" in changes else next(iter(changes))
    with pytest.raises(CloudEventError) as caught:
        to_mqtt(event, "t")
    assert caught.value.element == element


def test_an_error_reply_can_always_be_sent() -> None:
    """A handler's error text may quote anything (JSON strings can hold U+0000 and lone
    surrogates); the error reply must still be an event the binding can publish."""
    request = from_mqtt(
        MqttMessage(
            topic="t", payload=b'{"JobOrderID": "\\u0000\\ud800\\ufeff"}', user_properties=CORE
        )
    )
    job_order_id = request.data["JobOrderID"]
    reply = request.error_reply(
        source="urn:gateway", code="invalid-request", message=f"unknown job {job_order_id}"
    )
    received = from_mqtt(over_the_wire(to_mqtt(reply, "mes/replies")))
    assert received.errorcode == "invalid-request"
    assert (received.errormessage or "").startswith("unknown job ")


@settings(max_examples=100)
@given(msgpack_containers, st.sampled_from([MSGPACK, "application/x-msgpack"]))
@example(b"\x01\x02", MSGPACK)
@example(b"", MSGPACK)
def test_msgpack_bytes_data_round_trips(value: Any, content_type: str) -> None:
    """A msgpack ``bin`` decodes to ``bytes``; sending that event must encode it again."""
    event = CloudEvent(type="t", source="s", datacontenttype=content_type, data=value)
    assert from_mqtt(to_mqtt(event, "t")).data == value


def test_a_reply_round_trips_with_its_correlation() -> None:
    request = CloudEvent(
        type="com.example.cmd.v1",
        source="urn:mes",
        subject="st1",
        correlationid="conv-1",
        data={"Comment": "x"},
    )
    message = to_mqtt(request, "gw/st1/commands", response_topic="mes/replies/1")
    received = from_mqtt(message)
    reply = received.reply(source="urn:gateway", data={"ReturnStatus": 0})
    reply_message = to_mqtt(reply, message.response_topic or "")
    assert reply_message.correlation_data == correlation_of(message) == b"conv-1"
    assert from_mqtt(reply_message) == reply


def test_a_reply_to_a_request_without_correlation_data_correlates_by_id() -> None:
    request = CloudEvent(type="com.example.cmd.v1", source="urn:mes", data={"Comment": "x"})
    message = to_mqtt(request, "gw/st1/commands", response_topic="mes/replies/1")
    assert message.correlation_data is None
    reply = from_mqtt(message).reply(source="urn:gateway")
    assert to_mqtt(reply, "mes/replies/1").correlation_data == request.id.encode()


def test_binary_correlation_data_is_legal_and_echoed() -> None:
    message = MqttMessage(topic="t", correlation_data=b"\xff\xfe\x00", user_properties=CORE)
    event = from_mqtt(message)
    assert event.correlationid is None
    assert correlation_of(message) == b"\xff\xfe\x00"


def test_a_message_from_another_mqtt_client_decodes() -> None:
    message = MqttMessage(
        topic="gw/st1/commands",
        payload=msgpack.packb({"JobOrderID": "j1"}),
        content_type="application/msgpack",
        correlation_data=b"corr-1",
        response_topic="mes/replies",
        message_expiry_interval=60,
        user_properties=[
            ("specversion", "1.0"),
            ("id", "1"),
            ("source", "urn:mes"),
            ("type", "org.opcfoundation.ISA95-JOBCONTROL_V2.Start.v2"),
            ("subject", "st1"),
            ("time", "2024-05-06T07:08:09.5+02:00"),
            ("priority", "high"),
        ],
    )
    event = from_mqtt(message)
    assert event.data == {"JobOrderID": "j1"}
    assert event.correlationid == "corr-1"
    assert event.expiryinterval == 60
    assert event.time == datetime(2024, 5, 6, 5, 8, 9, 500000, tzinfo=UTC)
    assert event.extensions == {"priority": "high"}
    assert event.datacontenttype == "application/msgpack"


def test_to_mqtt_validates_the_event() -> None:
    with pytest.raises(CloudEventError) as caught:
        to_mqtt(CloudEvent(type="", source="s"), "t")
    assert caught.value.element == "type"
    with pytest.raises(CloudEventError) as caught:
        to_mqtt(CloudEvent(type="t", source="s", datacontenttype="text/plain", data={}), "t")
    assert caught.value.element == "datacontenttype"


# -- robustness ------------------------------------------------------------------------------

attribute_names = st.one_of(
    extension_names,
    st.sampled_from([*KNOWN_ATTRIBUTES, "data", "extensions", "", "X", "a-b"]),
    st.text(max_size=25),
)
attribute_values = st.one_of(
    st.sampled_from(["1.0", "PUT", "60", "-1", "2024-01-01T00:00:00Z", "2024-01-01", ""]),
    st.text(max_size=40),
    st.text(alphabet="x", min_size=4090, max_size=4100),
)
pairs = st.tuples(attribute_names, attribute_values)
extra_properties = st.one_of(
    st.lists(pairs, max_size=8, unique_by=lambda pair: pair[0]),  # mostly well-formed
    st.lists(pairs, max_size=70),  # duplicates and too many
)
payloads = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda value: json.dumps(value).encode()),
    msgpack_containers.map(lambda value: msgpack.packb(value, use_bin_type=True)),
)
content_types = st.one_of(
    st.none(),
    st.sampled_from([JSON, MSGPACK, "application/x-msgpack", "text/plain", "", "a/b+json"]),
    st.text(max_size=30),
)


@st.composite
def mqtt_messages(draw: st.DrawFn) -> MqttMessage:
    core = draw(st.just(CORE) | st.lists(st.sampled_from(CORE), max_size=4, unique=True))
    properties = draw(st.permutations(core + draw(extra_properties)))
    return MqttMessage(
        topic="gw/x/commands",
        payload=draw(payloads),
        content_type=draw(content_types),
        correlation_data=draw(st.none() | st.binary(max_size=40)),
        response_topic=draw(st.none() | st.text(max_size=20)),
        message_expiry_interval=draw(st.none() | st.integers(-(2**40), 2**40)),
        user_properties=properties,
    )


def decode_or_reject(message: MqttMessage) -> CloudEvent | None:
    """``from_mqtt`` must return a valid event or raise ``CloudEventError``, nothing else.

    Any other exception propagates and fails the test.
    """
    rejection: CloudEventError | None = None
    try:
        event = from_mqtt(message)
    except CloudEventError as error:
        rejection = error
    if rejection is not None:
        assert isinstance(rejection.element, str)
        assert isinstance(rejection.reason, str)
        assert rejection.reason
        note_outcome(f"rejected: {rejection.reason[:25]}")
        return None
    note_outcome("decoded")
    assert isinstance(event, CloudEvent)
    assert event.validate() is event
    return event


# Generating whole MQTT messages is slow on a loaded CI machine: that is not a failure.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mqtt_messages())
def test_any_message_decodes_or_is_rejected_with_a_cloud_event_error(
    message: MqttMessage,
) -> None:
    event = decode_or_reject(message)
    if event is not None:  # what was accepted survives being sent on (no type: JSON, named)
        resent = from_mqtt(to_mqtt(event, message.topic))
        assert resent.replace(datacontenttype=resent.datacontenttype or JSON) == event.replace(
            datacontenttype=event.datacontenttype or JSON
        )


@settings(max_examples=300)
@given(
    st.binary(max_size=300),
    content_types,
    st.none() | st.binary(max_size=40),
    st.none() | st.integers(-(2**40), 2**40),
)
def test_random_payload_and_properties_of_a_valid_header_decode_or_are_rejected(
    payload: bytes, content_type: str | None, correlation: bytes | None, expiry: int | None
) -> None:
    message = MqttMessage(
        topic="t",
        payload=payload,
        content_type=content_type,
        correlation_data=correlation,
        message_expiry_interval=expiry,
        user_properties=CORE,
    )
    event = decode_or_reject(message)
    if event is not None and expiry is not None:
        assert event.expiryinterval == expiry


@pytest.mark.parametrize(
    ("properties", "element"),
    [
        ([*CORE, ("id", "2")], "id"),
        ([*CORE, ("datacontenttype", JSON)], "datacontenttype"),
        ([*CORE, ("expiryinterval", "5")], "expiryinterval"),
        ([*CORE, ("Bad-Name", "x")], "Bad-Name"),
        ([*CORE, ("data", "x")], "data"),
        ([*CORE, ("time", "tomorrow")], "time"),
        ([*CORE, ("method", "PATCH")], "method"),
        (CORE[1:], "specversion"),
        ([("specversion", "0.3"), *CORE[1:]], "specversion"),
        ([*CORE, *[(f"x{index}", "v") for index in range(61)]], "user properties"),
    ],
    ids=[
        "duplicate",
        "content-type-as-user-property",
        "expiry-as-user-property",
        "bad-extension-name",
        "data-as-attribute",
        "bad-time",
        "bad-method",
        "no-specversion",
        "old-specversion",
        "too-many",
    ],
)
def test_bad_user_properties_are_rejected_by_name(
    properties: list[tuple[str, str]], element: str
) -> None:
    with pytest.raises(CloudEventError) as caught:
        from_mqtt(MqttMessage(topic="t", user_properties=properties))
    assert caught.value.element == element


@pytest.mark.parametrize(
    ("changes", "element"),
    [
        ({"message_expiry_interval": -1}, "expiryinterval"),
        ({"message_expiry_interval": 2**32}, "expiryinterval"),
        ({"payload": b"{", "content_type": JSON}, "data"),
        ({"payload": b"\xc1", "content_type": MSGPACK}, "data"),
        ({"payload": b"not json", "content_type": None}, "data"),
        ({"payload": b"1" * 5000, "content_type": JSON}, "data"),
    ],
    ids=[
        "negative-expiry",
        "expiry-over-32-bit",
        "bad-json",
        "bad-msgpack",
        "no-content-type-means-json",
        "json-number-too-long",
    ],
)
def test_bad_mqtt_properties_and_payloads_are_rejected_by_name(
    changes: dict[str, Any], element: str
) -> None:
    message = MqttMessage(topic="t", user_properties=CORE, **changes)
    with pytest.raises(CloudEventError) as caught:
        from_mqtt(message)
    assert caught.value.element == element


def test_correlation_of_salvages_correlation_from_a_malformed_message() -> None:
    broken = MqttMessage(topic="t", user_properties=[("correlationid", "c-9"), ("id", "")])
    assert correlation_of(broken) == b"c-9"
    with_data = MqttMessage(topic="t", correlation_data=b"\xff", user_properties=[])
    assert correlation_of(with_data) == b"\xff"
    assert correlation_of(MqttMessage(topic="t")) is None
