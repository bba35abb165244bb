"""The media types CloudEvent ``data`` can be encoded in, and how a content type names one.

A leaf module: ``gateway.cloudevents`` (which picks a reply's content type) and
``gateway.codecs`` (which encodes the data) both read it, so neither imports the other for it.
"""

from __future__ import annotations

from enum import StrEnum

JSON = "application/json"
MSGPACK = "application/msgpack"


class DataFormat(StrEnum):
    """A data encoding the gateway has a codec for (value: its canonical media type)."""

    JSON = JSON
    MSGPACK = MSGPACK


def data_format(content_type: str | None) -> DataFormat | None:
    """The format ``content_type`` asks for (parameters such as ``; charset=utf-8`` ignored);
    no content type means JSON, an unknown one ``None``."""
    if content_type is None:
        return DataFormat.JSON
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == JSON or media_type.endswith("+json"):
        return DataFormat.JSON
    if media_type in (MSGPACK, "application/x-msgpack"):
        return DataFormat.MSGPACK
    return None
