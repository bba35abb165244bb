"""CloudEvents as MessagePack maps (structured mode), and the checks on the way in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgpack
import pytest

from gateway.cloudevents import MSGPACK, CloudEvent
from gateway.errors import CloudEventError
from gateway_msgpack_rpc.codec import from_map, to_map


def round_trip(event: CloudEvent) -> CloudEvent:
    """Through the map and the MessagePack bytes, as an RPC frame carries it."""
    packed = msgpack.packb(to_map(event), use_bin_type=True)
    return from_map(msgpack.unpackb(packed, raw=False))


@pytest.mark.parametrize(
    "event",
    [
        CloudEvent(type="t.v1", source="urn:s"),
        CloudEvent(
            type="t.v1",
            source="urn:s",
            id="J1:tighten:1",
            subject="cell1",
            time=datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
            datacontenttype=MSGPACK,
            data={"torque": 85.2, "ok": True, "steps": [1, 2, None], "raw": b"\x00\xff"},
            correlationid="J1:tighten:1",
            expiryinterval=30,
            extensions={"joborderid": "J1"},
        ),
        CloudEvent(type="t.v1", source="urn:s", datacontenttype="image/png", data=b"\x89PNG"),
        CloudEvent(type="t.v1", source="urn:s", errorcode="busy", errormessage="try later"),
    ],
)
def test_an_event_survives_the_round_trip(event: CloudEvent) -> None:
    assert round_trip(event) == event


def test_attributes_are_text_except_expiryinterval_and_data_is_a_value() -> None:
    event = CloudEvent(type="t.v1", source="urn:s", id="1", expiryinterval=5, data={"a": [1, 2]})
    assert to_map(event) == {
        "specversion": "1.0",
        "id": "1",
        "source": "urn:s",
        "type": "t.v1",
        "expiryinterval": 5,
        "data": {"a": [1, 2]},
    }


GOOD: dict[str, Any] = {"specversion": "1.0", "id": "1", "source": "urn:s", "type": "t.v1"}
INTEGER_KEY: dict[Any, Any] = {**GOOD, 1: "x"}


@pytest.mark.parametrize(
    ("value", "element"),
    [
        ([GOOD], "event"),
        ({k: v for k, v in GOOD.items() if k != "source"}, "source"),
        ({**GOOD, "specversion": "0.3"}, "specversion"),
        (INTEGER_KEY, "1"),
        ({**GOOD, "subject": b"cell"}, "subject"),
        ({**GOOD, "time": "noon"}, "time"),
        ({**GOOD, "expiryinterval": -1}, "expiryinterval"),
        ({**GOOD, "expiryinterval": True}, "expiryinterval"),
        ({**GOOD, "Bad-Name": "x"}, "Bad-Name"),
        ({**GOOD, **{f"x{i}": "v" for i in range(70)}}, "event"),
    ],
)
def test_a_bad_map_names_the_offending_attribute(value: Any, element: str) -> None:
    with pytest.raises(CloudEventError) as error:
        from_map(value)
    assert error.value.element == element


def test_data_that_cannot_be_encoded_is_refused_by_name() -> None:
    with pytest.raises(CloudEventError, match="data"):
        to_map(CloudEvent(type="t.v1", source="urn:s", data={"when": object()}))
