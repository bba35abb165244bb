"""MessagePack: the CloudEvent data codec for ``application/msgpack``."""

from __future__ import annotations

from typing import Any

import cattrs
import msgpack
from cattrs.preconf.msgpack import make_converter

from gateway.errors import CloudEventError


class MsgpackCodec:
    content_type = "application/msgpack"

    def __init__(self) -> None:
        self.converter: cattrs.Converter = make_converter()

    def dumps(self, value: Any) -> bytes:
        try:
            packed: bytes = msgpack.packb(self.converter.unstructure(value), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as error:
            raise CloudEventError("data", f"cannot be encoded as msgpack: {error}") from None
        return packed

    def loads(self, payload: bytes) -> Any:
        try:
            return msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception as error:  # msgpack raises several unrelated types for bad input
            raise CloudEventError("data", f"is not valid msgpack: {error}") from None


CODEC = MsgpackCodec()
