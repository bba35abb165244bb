"""The MessagePack data codec: round trips (bytes included), structuring, and bad payloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.codecs import codec_for, decode_data, encode_data
from gateway.codecs.base import structure
from gateway.codecs.msgpack import CODEC
from gateway.errors import CloudEventError

msgpack_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
msgpack_values = st.recursive(
    msgpack_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=10) | st.integers(-100, 100), children, max_size=5)
    ),
    max_leaves=20,
)


@dataclass
class TorqueResult:
    Station: str
    Torque: float
    Trace: bytes
    Ok: bool


@settings(max_examples=300)
@given(msgpack_values)
def test_any_msgpack_value_round_trips(value: Any) -> None:
    assert CODEC.loads(CODEC.dumps(value)) == value


@settings(max_examples=200)
@given(msgpack_values.filter(lambda value: value is not None and not isinstance(value, bytes)))
def test_data_helpers_round_trip_for_msgpack_content_types(value: Any) -> None:
    for content_type in ("application/msgpack", "application/x-msgpack"):
        assert decode_data(encode_data(value, content_type), content_type) == value


@settings(max_examples=200)
@given(st.text(max_size=20), st.floats(allow_nan=False), st.binary(max_size=50), st.booleans())
def test_a_payload_structures_into_its_dataclass(
    station: str, torque: float, trace: bytes, ok: bool
) -> None:
    result = TorqueResult(station, torque, trace, ok)
    plain = CODEC.loads(CODEC.dumps(result))
    assert plain == {"Station": station, "Torque": torque, "Trace": trace, "Ok": ok}
    assert structure(CODEC.converter, plain, TorqueResult) == result


@pytest.mark.parametrize(
    "plain",
    [
        {"Station": "s"},
        {"Station": "s", "Torque": "strong", "Trace": b"", "Ok": True},
        [1, 2, 3],
        b"bytes",
    ],
)
def test_a_payload_of_the_wrong_shape_is_rejected_as_data(plain: Any) -> None:
    with pytest.raises(CloudEventError) as caught:
        structure(CODEC.converter, plain, TorqueResult)
    assert caught.value.element == "data"


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # never used
        b"\x92\x01",  # array of 2 with one item
        b"\x01\x02",  # extra data
        b"\xdd\xff\xff\xff\xff",  # array32 longer than the payload
        b"\x91" * 100_000,  # nested too deeply
        b"\x81\x91\x01\x02",  # map with an unhashable (array) key
    ],
    ids=["reserved", "truncated", "extra-data", "huge-length", "too-deep", "unhashable-key"],
)
def test_invalid_msgpack_is_rejected_as_data(payload: bytes) -> None:
    with pytest.raises(CloudEventError) as caught:
        CODEC.loads(payload)
    assert caught.value.element == "data"


@pytest.mark.parametrize(
    "value", [2**64, -(2**63) - 1, {"a": object()}], ids=["too-big", "too-small", "object"]
)
def test_a_value_msgpack_cannot_carry_is_rejected_as_data(value: Any) -> None:
    with pytest.raises(CloudEventError) as caught:
        CODEC.dumps(value)
    assert caught.value.element == "data"


def test_content_type_lookup() -> None:
    assert codec_for("application/msgpack") is CODEC
    assert codec_for("application/x-msgpack") is CODEC
    assert codec_for("APPLICATION/MSGPACK; foo=bar") is CODEC


def test_payload_from_another_msgpack_writer_decodes() -> None:
    payload = msgpack.packb({"JobOrderID": "j1", "Blob": b"\x00\x01", 7: [1.5, None]})
    assert CODEC.loads(payload) == {"JobOrderID": "j1", "Blob": b"\x00\x01", 7: [1.5, None]}
