"""Documents are compact JSON strings (plain Redis, no RedisJSON module)."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads(text: str | bytes | None) -> Any:
    """The value of a stored document; a missing key (``None``) reads as ``None``."""
    return None if text is None else json.loads(text)
