"""Cutting a byte stream into frames: whatever the read boundaries, whatever the frame size."""

from __future__ import annotations

import itertools
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_msgpack_rpc.framing import FrameReader, Unskippable, _Skipper
from gateway_msgpack_rpc.protocol import Invalid, Request, parse_message

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=300)
    | st.binary(max_size=300)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=40))
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=60,
)


def pack(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(point % (len(data) + 1) for point in points)})
    return [data[start:end] for start, end in itertools.pairwise(edges)]


@given(values, st.lists(st.integers(min_value=0), max_size=8))
@settings(max_examples=150)
def test_the_skipper_finds_the_end_of_any_object_however_it_is_cut(
    value: Any, points: list[int]
) -> None:
    data = pack(value)
    *pieces, last = cut(data, points)
    skipper = _Skipper(budget=len(data) + 10)
    assert [skipper.consume(piece) for piece in pieces] == [None] * len(pieces)
    assert skipper.consume(last + b"\x01trailing") == len(last)


@given(st.lists(values, min_size=1, max_size=5), st.lists(st.integers(min_value=0), max_size=8))
@settings(max_examples=80)
def test_frames_come_out_as_they_went_in_whatever_the_reads(
    frames: list[Any], points: list[int]
) -> None:
    reader = FrameReader(max_frame_bytes=1 << 20, max_skip_bytes=1 << 20)
    data = b"".join(pack([0, index, "m", [frame]]) for index, frame in enumerate(frames))
    out = [frame for piece in cut(data, points) for frame in reader.feed(piece)]
    assert out == [[0, index, "m", [frame]] for index, frame in enumerate(frames)]


@given(st.integers(min_value=1, max_value=40), st.lists(st.integers(min_value=0), max_size=8))
@settings(max_examples=100)
def test_an_oversize_frame_is_rejected_once_and_the_next_one_decoded(
    kilobytes: int, points: list[int]
) -> None:
    reader = FrameReader(max_frame_bytes=1024, max_skip_bytes=1 << 20)
    big = pack([0, 7, "publish", [{"data": "x" * (1024 * kilobytes)}]])
    data = big + pack([0, 8, "heartbeat", ["tool"]])
    out = [frame for piece in cut(data, points) for frame in reader.feed(piece)]
    rejected, after = out
    assert isinstance(rejected, Invalid)
    assert (rejected.code, rejected.msgid, rejected.kind) == ("request-too-large", 7, 0)
    assert parse_message(after) == Request(8, "heartbeat", ["tool"])


def test_a_frame_past_the_skip_budget_ends_the_stream() -> None:
    reader = FrameReader(max_frame_bytes=1024, max_skip_bytes=4096)
    out = reader.feed(pack([0, 7, "publish", ["x" * 10_000]]))
    assert isinstance(out[0], Invalid)
    assert isinstance(out[1], Unskippable)


def test_bytes_that_are_not_msgpack_are_dropped_and_decoding_starts_afresh() -> None:
    reader = FrameReader(max_frame_bytes=1024, max_skip_bytes=4096)
    (rejected,) = reader.feed(b"\xc1" + pack([0, 1, "lost", []]))
    assert isinstance(rejected, Invalid)
    assert (rejected.code, rejected.msgid) == ("parse-error", None)
    assert reader.feed(pack([0, 2, "next", []])) == [[0, 2, "next", []]]


def test_a_declared_length_beyond_the_limit_is_refused_without_allocating_it() -> None:
    reader = FrameReader(max_frame_bytes=1024, max_skip_bytes=4096)
    header = b"\x94\x00\x05\xa7publish\xdd\xff\xff\xff\xff"  # params: 4 billion elements
    (rejected,) = reader.feed(header)
    assert isinstance(rejected, Invalid)
    assert (rejected.code, rejected.msgid) == ("request-too-large", 5)
