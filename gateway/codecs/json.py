"""JSON: the CloudEvent data codec for ``application/json``."""

from __future__ import annotations

import json
from typing import Any

import cattrs
from cattrs.preconf.json import make_converter

from gateway.errors import CloudEventError


class JsonCodec:
    content_type = "application/json"

    def __init__(self) -> None:
        self.converter: cattrs.Converter = make_converter()

    def dumps(self, value: Any) -> bytes:
        try:
            try:  # plain data (most payloads) as it is: cattrs would walk it to change nothing
                text = json.dumps(value, separators=(",", ":"), allow_nan=False)
            except TypeError:  # something only cattrs unstructures (a dataclass, a datetime)
                plain = self.converter.unstructure(value)
                text = json.dumps(plain, separators=(",", ":"), allow_nan=False)
            return text.encode()
        except (TypeError, ValueError) as error:
            raise CloudEventError("data", f"cannot be encoded as JSON: {error}") from None

    def loads(self, payload: bytes) -> Any:
        try:
            return json.loads(payload)
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, int digit limit
            raise CloudEventError("data", f"is not valid JSON: {error}") from None
        except RecursionError:
            raise CloudEventError("data", "is nested too deeply") from None


CODEC = JsonCodec()
