"""The JSON data codec: round trips, structuring into types, and bad payloads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC
from enum import Enum, StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codecs import codec_for, decode_data, encode_data
from gateway.codecs.base import structure
from gateway.codecs.json import CODEC
from gateway.errors import CloudEventError

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


@dataclass
class Part:
    PartID: str
    Quantity: int


@dataclass
class StoreCall:
    JobOrderID: str
    Parts: list[Part] = field(default_factory=list)
    Comment: str | None = None


@settings(max_examples=300)
@given(json_values)
def test_any_json_value_round_trips(value: Any) -> None:
    payload = CODEC.dumps(value)
    assert CODEC.loads(payload) == value
    # No NaN/Infinity or other non-standard output: any JSON parser reads it.
    assert json.loads(payload.decode("utf-8")) == value


@settings(max_examples=200)
@given(json_values.filter(lambda value: value is not None))
def test_data_helpers_round_trip_for_json_content_types(value: Any) -> None:
    for content_type in ("application/json", "application/json; charset=utf-8", None):
        assert decode_data(encode_data(value, content_type), content_type) == value
    assert decode_data(encode_data(value, "application/cloudevents+json"), "text/x+json") == value


@settings(max_examples=200)
@given(
    st.text(min_size=1, max_size=20),
    st.lists(st.tuples(st.text(max_size=10), st.integers(-1000, 1000)), max_size=4),
    st.none() | st.text(max_size=20),
)
def test_a_payload_structures_into_its_dataclass(
    order_id: str, parts: list[tuple[str, int]], comment: str | None
) -> None:
    call = StoreCall(order_id, [Part(name, quantity) for name, quantity in parts], comment)
    payload = CODEC.dumps(call)
    plain = CODEC.loads(payload)
    assert plain["JobOrderID"] == order_id
    assert structure(CODEC.converter, plain, StoreCall) == call


@pytest.mark.parametrize(
    "plain",
    [
        {"Parts": []},
        {"JobOrderID": "j1", "Parts": [{"PartID": "p"}]},
        {"JobOrderID": "j1", "Parts": [{"PartID": "p", "Quantity": "many"}]},
        {"JobOrderID": "j1", "Parts": "not-a-list"},
        ["JobOrderID"],
        "text",
        None,
    ],
)
def test_a_payload_of_the_wrong_shape_is_rejected_as_data(plain: Any) -> None:
    with pytest.raises(CloudEventError) as caught:
        structure(CODEC.converter, plain, StoreCall)
    assert caught.value.element == "data"
    assert caught.value.reason


def test_a_structure_error_names_the_offending_field() -> None:
    with pytest.raises(CloudEventError) as caught:
        structure(CODEC.converter, {"JobOrderID": "j1", "Parts": [{"PartID": "p"}]}, StoreCall)
    assert "Quantity" in caught.value.reason


@pytest.mark.parametrize(
    "payload",
    [b"{", b"not json", b"\xff\xfe\xfa", b"[1, 2", b'{"a": }', b"[" * 100_000],
)
def test_invalid_json_is_rejected_as_data(payload: bytes) -> None:
    with pytest.raises(CloudEventError) as caught:
        CODEC.loads(payload)
    assert caught.value.element == "data"


def test_a_json_number_too_long_to_convert_is_rejected_as_data() -> None:
    # Python refuses to parse integers of more than 4300 digits (ValueError, not JSONDecodeError).
    with pytest.raises(CloudEventError) as caught:
        CODEC.loads(b"1" * 5000)
    assert caught.value.element == "data"


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), {"a": object()}, {1j}, 10**5000],
    ids=["nan", "infinity", "object", "complex", "huge-integer"],
)
def test_a_value_json_cannot_carry_is_rejected_as_data(value: Any) -> None:
    with pytest.raises(CloudEventError) as caught:
        CODEC.dumps(value)
    assert caught.value.element == "data"


def test_content_type_lookup() -> None:
    assert codec_for("application/json") is CODEC
    assert codec_for("Application/JSON; charset=utf-8") is CODEC
    assert codec_for("application/vnd.example+json") is CODEC
    assert codec_for(None) is CODEC
    assert codec_for("text/plain") is None
    assert codec_for("") is None


def test_empty_payload_is_no_data_and_bytes_pass_through() -> None:
    assert decode_data(b"", "application/json") is None
    assert encode_data(None, "application/json") == b""
    assert encode_data(b'{"pre":"encoded"}', "application/json") == b'{"pre":"encoded"}'
    assert encode_data(bytearray(b"raw"), "text/plain") == b"raw"
    assert decode_data(b"raw", "text/plain") == b"raw"


def test_structured_data_for_a_content_type_without_codec_is_rejected() -> None:
    with pytest.raises(CloudEventError) as caught:
        encode_data({"a": 1}, "text/plain")
    assert caught.value.element == "datacontenttype"


class Colour(Enum):
    RED = "red"


class Level(StrEnum):
    HIGH = "high"


def through_cattrs(value: Any) -> bytes:
    """The encoding of every value before plain data skipped cattrs."""
    plain = CODEC.converter.unstructure(value)
    return json.dumps(plain, separators=(",", ":"), allow_nan=False).encode()


@settings(max_examples=200)
@given(
    st.recursive(
        json_scalars
        | st.sampled_from([Colour.RED, Level.HIGH, b"\x00bytes"])
        | st.builds(Part, st.text(max_size=5), st.integers(0, 9))
        | st.datetimes(timezones=st.just(UTC)),
        lambda children: (
            st.lists(children, max_size=4)
            | st.lists(children, max_size=3).map(tuple)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_plain_data_and_what_cattrs_unstructures_encode_as_before(value: Any) -> None:
    assert CODEC.dumps(value) == through_cattrs(value)
