"""Cutting a TCP byte stream into MessagePack-RPC frames, with a size limit per frame.

MessagePack-RPC has no length prefix: a frame is one MessagePack object, and the next one starts
where it ends. ``FrameReader`` decodes with ``msgpack.Unpacker`` (C speed) and watches how many
bytes the frame in progress has taken. A frame that grows past the limit, or that cannot be
decoded (invalid UTF-8, a declared length beyond the limits), is *rejected* and then walked over
by ``_Skipper``, which reads only the MessagePack headers and counts payload bytes without keeping
them. So the connection goes on with the next frame, and an oversize request costs no more memory
than the limit. Only bytes that are not MessagePack at all (``0xc1``) leave no way to find the next
frame: then what was buffered is dropped and decoding starts afresh with the next bytes read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from gateway_msgpack_rpc.protocol import (
    NOTIFICATION,
    PARSE_ERROR,
    TOO_LARGE,
    Invalid,
    is_msgid,
    kind_of,
    message_type,
)

READ_SIZE = 65_536
"""Bytes asked for per read; the buffer holds at most the limit plus one read."""


@dataclass(frozen=True)
class Unskippable:
    """Last of what ``feed`` returns when a rejected frame goes on past the skip budget: the
    connection must be closed once the frames before it are handled."""

    message: str


class _OverBudget(Exception):
    pass


class FrameReader:
    """Feeds bytes in, gets decoded frames (any MessagePack value) and ``Invalid`` ones out."""

    def __init__(self, max_frame_bytes: int, max_skip_bytes: int) -> None:
        self.limit = max_frame_bytes
        self.skip_budget = max(max_skip_bytes, max_frame_bytes)
        self._skipper: _Skipper | None = None
        self._restart()

    def _restart(self) -> None:
        limit = self.limit
        self._unpacker = msgpack.Unpacker(
            raw=False,
            strict_map_key=False,  # the CloudEvent codec names a bad key better than msgpack
            max_buffer_size=0,  # no BufferFull: feed() keeps the buffer within limit + one read
            max_str_len=limit,
            max_bin_len=limit,
            max_ext_len=limit,
            max_array_len=limit,
            max_map_len=limit,
        )
        self._chunks: list[bytes] = []  # what was fed since the chunk holding the frame start
        self._chunks_start = 0  # stream offset of self._chunks[0]
        self._fed = 0  # stream offset after the last byte fed
        self._frame_start = 0  # stream offset where the frame in progress starts

    def feed(self, data: bytes) -> list[Any]:
        """The frames completed by ``data``: decoded values, ``Invalid`` markers, and last an
        ``Unskippable`` marker if a rejected frame exceeds the skip budget."""
        frames: list[Any] = []
        try:
            while data:
                skipping = self._skipper is not None
                data = self._skip(data) if skipping else self._decode(data, frames)
        except _OverBudget:
            frames.append(Unskippable(f"request longer than {self.skip_budget} bytes"))
        return frames

    def _decode(self, data: bytes, frames: list[Any]) -> bytes:
        """Decode what ``data`` completes; returns bytes still to walk when a frame is rejected."""
        self._unpacker.feed(data)
        self._chunks.append(data)
        self._fed += len(data)
        try:
            for value in self._unpacker:
                end = self._unpacker.tell()
                size, self._frame_start = end - self._frame_start, end
                frames.append(self._checked(value, size))
        except ValueError as error:  # FormatError, StackError, UnicodeDecodeError, limits
            return self._reject_in_progress(frames, *_decode_failure(error))
        if self._fed - self._frame_start > self.limit:
            message = f"request larger than the limit of {self.limit} bytes"
            return self._reject_in_progress(frames, TOO_LARGE, message)
        self._drop_consumed_chunks()
        return b""

    def _checked(self, value: Any, size: int) -> Any:
        """A frame decoded in one read can still be over the limit."""
        if size <= self.limit:
            return value
        kind, msgid = _salvage_from_value(value)
        message = f"request of {size} bytes exceeds the limit of {self.limit} bytes"
        return Invalid(TOO_LARGE, message, kind=kind, msgid=msgid)

    def _drop_consumed_chunks(self) -> None:
        while self._chunks and self._chunks_start + len(self._chunks[0]) <= self._frame_start:
            self._chunks_start += len(self._chunks.pop(0))

    def _reject_in_progress(self, frames: list[Any], code: str, message: str) -> bytes:
        """Reject the frame in progress and hand its bytes so far to a skipper."""
        pending = b"".join(self._chunks)[self._frame_start - self._chunks_start :]
        kind, msgid = _salvage_from_prefix(pending[:64])
        frames.append(Invalid(code, message, kind=kind, msgid=msgid))
        self._skipper = _Skipper(self.skip_budget)
        self._restart()
        return pending

    def _skip(self, data: bytes) -> bytes:
        """Walk ``data`` as part of the rejected frame; returns the bytes after its end."""
        assert self._skipper is not None
        try:
            end = self._skipper.consume(data)
        except _NotMsgpack:
            self._skipper = None
            return b""  # no way to find the next frame in these bytes: drop them
        if end is None:
            return b""
        self._skipper = None
        return data[end:]


def _decode_failure(error: ValueError) -> tuple[str, str]:
    text = str(error)
    if "exceeds max_" in text:
        return TOO_LARGE, f"a length in the request exceeds the limit ({text})"
    if isinstance(error, msgpack.StackError):
        return PARSE_ERROR, "not decodable: nested too deeply"
    if isinstance(error, UnicodeDecodeError):
        return PARSE_ERROR, f"not decodable: a string is not UTF-8 ({error.reason})"
    return PARSE_ERROR, f"not MessagePack ({text or 'invalid byte'})"


def _salvage_from_value(value: Any) -> tuple[int | None, int | None]:
    """Message type and msgid of a decoded frame, as far as it has them."""
    kind = kind_of(value)
    if kind is None or kind == NOTIFICATION or len(value) < 2 or not is_msgid(value[1]):
        return kind, None
    return kind, value[1]


def _salvage_from_prefix(prefix: bytes) -> tuple[int | None, int | None]:
    """Message type and msgid from the first bytes of a frame that cannot be decoded whole."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(prefix) + 1)
    unpacker.feed(prefix)
    try:
        if unpacker.read_array_header() not in (3, 4):
            return None, None
        kind = message_type(unpacker.unpack())
        if kind is None:
            return None, None
        if kind == NOTIFICATION:
            return kind, None
        msgid = unpacker.unpack()
    except Exception:  # OutOfData, or any decoding error: nothing more to salvage
        return None, None
    return kind, msgid if is_msgid(msgid) else None


# -- walking over one MessagePack object ------------------------------------------------------

_PAYLOAD, _ARRAY, _MAP = 0, 1, 2
# Per first byte: (length bytes after it, what the length counts, a fixed count or size).
_Layout = tuple[int, int, int]


def _layouts() -> list[_Layout | None]:
    table: list[_Layout | None] = [None] * 256
    for byte in range(0x00, 0x80):
        table[byte] = (0, _PAYLOAD, 0)  # positive fixint
    for byte in range(0xE0, 0x100):
        table[byte] = (0, _PAYLOAD, 0)  # negative fixint
    for byte in range(0x80, 0x90):
        table[byte] = (0, _MAP, byte & 0x0F)
    for byte in range(0x90, 0xA0):
        table[byte] = (0, _ARRAY, byte & 0x0F)
    for byte in range(0xA0, 0xC0):
        table[byte] = (0, _PAYLOAD, byte & 0x1F)  # fixstr
    for byte in (0xC0, 0xC2, 0xC3):
        table[byte] = (0, _PAYLOAD, 0)  # nil, false, true
    for first, width in ((0xC4, 1), (0xC5, 2), (0xC6, 4), (0xD9, 1), (0xDA, 2), (0xDB, 4)):
        table[first] = (width, _PAYLOAD, 0)  # bin, str
    for first, width in ((0xC7, 1), (0xC8, 2), (0xC9, 4)):
        table[first] = (width, _PAYLOAD, 1)  # ext: length, then a type byte
    fixed = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4}
    fixed |= {0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}  # floats, ints, fixext
    for first, size in fixed.items():
        table[first] = (0, _PAYLOAD, size)
    for first, width in ((0xDC, 2), (0xDD, 4)):
        table[first] = (width, _ARRAY, 0)
    for first, width in ((0xDE, 2), (0xDF, 4)):
        table[first] = (width, _MAP, 0)
    return table  # 0xC1 stays None: never used by MessagePack


_LAYOUT = _layouts()


class _NotMsgpack(Exception):
    """The byte 0xc1: these bytes are not MessagePack."""


class _Skipper:
    """Walks one MessagePack object without decoding or keeping it.

    It tracks how many objects are still due (a container adds its elements) and how many
    payload bytes of the current one are left, so memory stays constant however large the
    object is; a header split across reads is kept until it is complete.
    """

    def __init__(self, budget: int) -> None:
        self._due = 1  # objects still to walk
        self._payload = 0  # payload bytes of the current object still to skip
        self._header = bytearray()
        self._layout: _Layout = (0, _PAYLOAD, 0)
        self._budget = budget
        self._walked = 0

    def consume(self, data: bytes) -> int | None:
        """The offset in ``data`` just after the object's end, or ``None`` if it goes on."""
        position, size, end = 0, len(data), None
        while True:
            step = min(self._payload, size - position)
            position += step
            self._payload -= step
            if self._payload == 0 and self._due == 0:
                end = position
                break
            if position == size:
                break
            position = self._read_header(data, position)
        self._walked += position
        if self._walked > self._budget:
            raise _OverBudget
        return end

    def _read_header(self, data: bytes, position: int) -> int:
        if not self._header:
            layout = _LAYOUT[data[position]]
            if layout is None:
                raise _NotMsgpack
            self._layout = layout
            self._header.append(data[position])
            position += 1
        width, counts, fixed = self._layout
        take = min(1 + width - len(self._header), len(data) - position)
        self._header += data[position : position + take]
        position += take
        if len(self._header) < 1 + width:
            return position  # the rest of the header comes with the next read
        length = int.from_bytes(self._header[1:], "big") + fixed
        self._header.clear()
        self._due -= 1
        if counts == _PAYLOAD:
            self._payload = length
        else:
            self._due += length if counts == _ARRAY else 2 * length
        return position
