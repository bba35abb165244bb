"""What a data codec is, and the lookup by content type."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import cattrs

from gateway.codecs import json, msgpack
from gateway.errors import CloudEventError
from gateway.mediatypes import MSGPACK, DataFormat, data_format

T = TypeVar("T")


class DataCodec(Protocol):
    """Encodes CloudEvent ``data`` values to bytes and back, and structures them into types."""

    content_type: str
    converter: cattrs.Converter

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, payload: bytes) -> Any: ...


def structure(converter: cattrs.Converter, value: Any, cls: type[T]) -> T:
    """Structure decoded data into ``cls``; a mismatch names the offending field."""
    try:
        return converter.structure(value, cls)
    except Exception as error:  # cattrs raises many kinds; all mean "wrong payload"
        raise CloudEventError("data", _describe(error)) from None


def _describe(error: Exception) -> str:
    if isinstance(error, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(error, path="data"))[:1000]
    return str(error)[:1000] or type(error).__name__


def codec_for(content_type: str | None) -> DataCodec | None:
    """The codec for a content type (parameters such as ``; charset=utf-8`` ignored)."""
    media = data_format(content_type)
    return None if media is None else _CODECS[media]


def encode_data(value: Any, content_type: str | None) -> bytes:
    """Bytes for a data value (``bytes`` pass through as the payload, except for msgpack)."""
    if value is None:
        return b""
    codec = codec_for(content_type)
    # bytes are an encoded payload, except for msgpack, where they are a value (bin) of their own
    if isinstance(value, bytes | bytearray) and (codec is None or codec.content_type != MSGPACK):
        return bytes(value)
    if codec is None:
        raise CloudEventError(
            "datacontenttype", f"{content_type!r} has no codec; pass the data as bytes"
        )
    return codec.dumps(value)


def decode_data(payload: bytes, content_type: str | None) -> Any:
    """The data value of a payload; unknown content types stay ``bytes``, empty is ``None``."""
    if not payload:
        return None
    codec = codec_for(content_type)
    if codec is None:
        return bytes(payload)
    return codec.loads(payload)


_CODECS: dict[DataFormat, DataCodec] = {
    DataFormat.JSON: json.CODEC,
    DataFormat.MSGPACK: msgpack.CODEC,
}
