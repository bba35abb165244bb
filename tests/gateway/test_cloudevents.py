"""The CloudEvent model: every bad attribute is rejected by name; replies carry correlation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from gateway.cloudevents import (
    JSON,
    MSGPACK,
    CloudEvent,
    attributes_as_text,
    event_from_attributes,
    format_time,
    parse_time,
)
from gateway.errors import CloudEventError, ValidationError

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
LONG = "x" * 4097


def valid_event(**changes: Any) -> CloudEvent:
    values: dict[str, Any] = {
        "type": "com.example.thing.v1",
        "source": "urn:test",
        "id": "event-1",
    }
    values.update(changes)
    return CloudEvent(**values)


def test_a_minimal_event_is_valid_and_gets_an_id() -> None:
    event = CloudEvent(type="com.example.thing.v1", source="urn:test").validate()
    assert event.specversion == "1.0"
    assert event.id
    assert CloudEvent(type="t", source="s").id != event.id


def test_a_fully_populated_event_is_valid() -> None:
    now = datetime.now(UTC)
    event = valid_event(
        subject="station-1",
        time=now,
        datacontenttype=JSON,
        dataschema="https://example.com/schema",
        data={"a": 1},
        correlationid="c-1",
        causationid="e-0",
        expiryinterval=0,
        expirytime=now + timedelta(hours=1),
        method="DELETE",
        traceparent=TRACEPARENT,
        tracestate="vendor=value",
        errorcode="invalid-request",
        errormessage="nope",
        extensions={"priority": "high", "x1": ""},
    )
    assert event.validate() is event
    assert event.attributes()["priority"] == "high"
    assert "data" not in event.attributes()


def bad(element: str, value: Any, label: str) -> Any:
    return pytest.param({element: value}, element, id=f"{element}-{label}")


BAD_ATTRIBUTES = [
    bad("id", None, "missing"),
    bad("id", "", "empty"),
    bad("id", 17, "not-text"),
    bad("id", LONG, "too-long"),
    bad("source", None, "missing"),
    bad("source", "", "empty"),
    bad("source", LONG, "too-long"),
    bad("type", None, "missing"),
    bad("type", "", "empty"),
    bad("type", b"bytes", "bytes"),
    bad("type", LONG, "too-long"),
    bad("specversion", "0.3", "old"),
    bad("specversion", "", "empty"),
    bad("specversion", 1.0, "float"),
    bad("subject", LONG, "too-long"),
    bad("subject", 5, "not-text"),
    bad("datacontenttype", LONG, "too-long"),
    bad("dataschema", LONG, "too-long"),
    bad("correlationid", LONG, "too-long"),
    bad("correlationid", 12, "not-text"),
    bad("causationid", LONG, "too-long"),
    bad("tracestate", LONG, "too-long"),
    bad("errorcode", LONG, "too-long"),
    bad("errormessage", LONG, "too-long"),
    bad("time", datetime(2024, 1, 1, 12, 0), "naive"),
    bad("time", "2024-01-01T12:00:00Z", "text"),
    bad("expirytime", datetime(2024, 1, 1, 12, 0), "naive"),
    bad("expiryinterval", -1, "negative"),
    bad("expiryinterval", 0x1_0000_0000, "over-32-bit"),
    bad("expiryinterval", 10**30, "huge"),
    bad("expiryinterval", 1.5, "float"),
    bad("expiryinterval", "60", "text"),
    bad("expiryinterval", True, "bool"),
    bad("method", "GET", "get"),
    bad("method", "put", "lowercase"),
    bad("method", "", "empty"),
    bad("traceparent", "not-a-traceparent", "garbage"),
    bad("traceparent", TRACEPARENT.upper(), "uppercase"),
    bad("traceparent", TRACEPARENT[:-1], "short"),
    bad("traceparent", TRACEPARENT + "0", "long"),
    bad("traceparent", TRACEPARENT + "\n", "trailing-newline"),
    bad("traceparent", "", "empty"),
]


@pytest.mark.parametrize(("changes", "element"), BAD_ATTRIBUTES)
def test_a_bad_attribute_is_rejected_by_name(changes: dict[str, Any], element: str) -> None:
    with pytest.raises(CloudEventError) as caught:
        valid_event(**changes).validate()
    assert caught.value.element == element
    assert caught.value.reason
    assert str(caught.value).startswith(f"{element}: ")


@pytest.mark.parametrize(
    "name",
    [
        "UPPER",
        "with-dash",
        "with_underscore",
        "with space",
        "",
        "a" * 21,
        "ümlaut",
        "name\n",
        "\nname",
    ],
)
def test_a_bad_extension_name_is_rejected(name: str) -> None:
    with pytest.raises(CloudEventError) as caught:
        valid_event(extensions={name: "value"}).validate()
    assert caught.value.element == name[:40]
    assert "lowercase" in caught.value.reason


@pytest.mark.parametrize("name", ["id", "type", "time", "correlationid", "data", "method"])
def test_a_known_attribute_is_not_accepted_as_extension(name: str) -> None:
    with pytest.raises(CloudEventError) as caught:
        valid_event(extensions={name: "value"}).validate()
    assert caught.value.element == name


def test_an_extension_value_must_be_a_short_string() -> None:
    with pytest.raises(CloudEventError) as caught:
        valid_event(extensions={"priority": 3}).validate()
    assert caught.value.element == "priority"
    with pytest.raises(CloudEventError) as caught:
        valid_event(extensions={"priority": LONG}).validate()
    assert caught.value.element == "priority"


def test_a_non_string_extension_name_is_rejected() -> None:
    with pytest.raises(CloudEventError) as caught:
        valid_event(extensions={7: "value"}).validate()
    assert caught.value.element == "7"


def test_boundaries_are_accepted() -> None:
    longest = valid_event(
        id="x" * 4096, expiryinterval=0xFFFF_FFFF, extensions={"a" * 20: "v" * 4096}
    )
    assert longest.validate() is longest
    assert (len(longest.id), longest.expiryinterval) == (4096, 0xFFFF_FFFF)
    assert longest.extensions == {"a" * 20: "v" * 4096}
    offset = valid_event(
        method="PUT", time=datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=-5)))
    )
    assert offset.validate() is offset
    assert offset.method == "PUT"


def test_cloud_event_error_is_a_validation_error() -> None:
    assert issubclass(CloudEventError, ValidationError)
    assert issubclass(CloudEventError, ValueError)


# -- replies ---------------------------------------------------------------------------------


def test_reply_correlates_with_the_request_id_when_it_has_no_correlation_id() -> None:
    request = valid_event(
        id="req-1", subject="station-7", traceparent=TRACEPARENT, data={"Comment": "hi"}
    )
    reply = request.reply(source="urn:gateway", data={"ReturnStatus": 0})
    assert reply.validate() is reply
    assert reply.correlationid == "req-1"
    assert reply.causationid == "req-1"
    assert reply.subject == "station-7"
    assert reply.type == request.type
    assert reply.source == "urn:gateway"
    assert reply.traceparent == TRACEPARENT
    assert reply.data == {"ReturnStatus": 0}
    assert reply.datacontenttype == JSON
    assert reply.id != request.id
    assert reply.time is not None
    assert reply.time.tzinfo is not None


def test_reply_keeps_the_request_correlation_id_and_content_type() -> None:
    request = valid_event(id="req-2", correlationid="conv-9", datacontenttype=MSGPACK)
    reply = request.reply(source="urn:gateway", type="com.example.thing.done.v1")
    assert reply.correlationid == "conv-9"
    assert reply.causationid == "req-2"
    assert reply.type == "com.example.thing.done.v1"
    assert reply.datacontenttype == MSGPACK
    assert reply.subject is None


def test_error_reply_carries_correlation_and_the_error() -> None:
    request = valid_event(
        id="req-3", correlationid="conv-3", subject="cell-1", datacontenttype=MSGPACK
    )
    reply = request.error_reply(source="urn:gateway", code="invalid-request", message="bad")
    assert reply.validate() is reply
    assert reply.correlationid == "conv-3"
    assert reply.causationid == "req-3"
    assert reply.subject == "cell-1"
    assert reply.type == request.type
    assert reply.errorcode == "invalid-request"
    assert reply.errormessage == "bad"
    assert reply.datacontenttype == JSON
    assert reply.data == {"error": "invalid-request", "message": "bad"}


def test_error_reply_truncates_a_long_message_to_a_valid_attribute() -> None:
    request = valid_event(id="req-4")
    reply = request.error_reply(source="urn:gateway", code="processing-failed", message=LONG * 3)
    assert reply.validate() is reply
    assert reply.errormessage is not None
    assert len(reply.errormessage) == 4096
    assert reply.correlationid == "req-4"


# -- text attributes -------------------------------------------------------------------------


def test_attributes_round_trip_as_text() -> None:
    event = valid_event(
        subject="s1",
        time=datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        expirytime=datetime(2024, 5, 6, 9, 0, tzinfo=timezone(timedelta(hours=2))),
        expiryinterval=30,
        method="PUT",
        extensions={"priority": "high"},
    )
    text = attributes_as_text(event)
    assert text["time"] == "2024-05-06T07:08:09.123456Z"
    assert text["expiryinterval"] == "30"
    assert all(isinstance(value, str) for value in text.values())
    assert event_from_attributes(text, None) == event


def test_event_from_attributes_names_a_missing_core_attribute() -> None:
    attributes = {"specversion": "1.0", "id": "1", "source": "s", "type": "t"}
    for name in ("specversion", "id", "source", "type"):
        incomplete = {key: value for key, value in attributes.items() if key != name}
        with pytest.raises(CloudEventError) as caught:
            event_from_attributes(incomplete, None)
        assert caught.value.element == name


@pytest.mark.parametrize("text", ["yesterday", "2024-01-01T00:00:00", "2024-13-01T00:00:00Z", ""])
def test_parse_time_rejects_a_bad_or_naive_timestamp(text: str) -> None:
    with pytest.raises(CloudEventError) as caught:
        parse_time("time", text)
    assert caught.value.element == "time"


def test_format_time_uses_z_for_utc() -> None:
    assert format_time(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2024-01-02T03:04:05Z"
    assert parse_time("time", "2024-01-02T03:04:05z") == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize("text", ["-1", "1.5", "ten", "٣", "12345678901", ""])
def test_a_bad_expiry_interval_text_is_rejected(text: str) -> None:
    attributes = {"specversion": "1.0", "id": "1", "source": "s", "type": "t"}
    with pytest.raises(CloudEventError) as caught:
        event_from_attributes({**attributes, "expiryinterval": text}, None)
    assert caught.value.element == "expiryinterval"
