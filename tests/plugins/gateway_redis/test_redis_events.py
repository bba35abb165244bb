"""CloudEvents kept as JSON documents (the replies a de-duplication marker replays)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.cloudevents import CloudEvent
from gateway_redis.events import event_from_json, event_to_json


def round_trip(event: CloudEvent) -> CloudEvent:
    return event_from_json(json.loads(json.dumps(event_to_json(event))))


def test_json_data_and_every_attribute_survive() -> None:
    event = CloudEvent(
        type="org.example.Reply.v1",
        source="urn:station-gateway:a",
        subject="line-1/cell-2",
        time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datacontenttype="application/json",
        data={"ReturnStatus": 0, "Items": [1, "two", None]},
        correlationid="c-1",
        expiryinterval=30,
        errorcode="invalid-request",
        extensions={"tenant": "acme"},
    )
    document = event_to_json(event)
    assert document["data"] == {"ReturnStatus": 0, "Items": [1, "two", None]}
    assert document["time"] == "2026-01-02T03:04:05Z"
    assert round_trip(event) == event


def test_bytes_travel_as_data_base64() -> None:
    event = CloudEvent(
        type="t", source="s", datacontenttype="application/octet-stream", data=b"\x00\xffraw"
    )
    document = event_to_json(event)
    assert "data" not in document
    assert document["data_base64"] == "AP9yYXc="
    assert round_trip(event) == event


def test_no_data_and_structured_data() -> None:
    @dataclass
    class Status:
        ReturnStatus: int

    assert "data" not in event_to_json(CloudEvent(type="t", source="s"))
    document = event_to_json(CloudEvent(type="t", source="s", data=Status(0)))
    assert document["data"] == {"ReturnStatus": 0}


def test_msgpack_data_is_kept_encoded_and_comes_back_decoded() -> None:
    data = {"Blob": b"\x00\x01", "Count": 3}
    event = CloudEvent(type="t", source="s", datacontenttype="application/msgpack", data=data)
    document = event_to_json(event)
    assert "data" not in document
    assert round_trip(event).data == data  # bytes inside stay bytes


def test_json_content_type_with_bytes_keeps_the_bytes() -> None:
    event = CloudEvent(type="t", source="s", datacontenttype="application/json", data=b"{}")
    assert round_trip(event).data == b"{}"
