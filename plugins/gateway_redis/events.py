"""CloudEvents as JSON documents (the CloudEvents JSON event format, structured mode).

The de-duplication marker keeps the replies sent for an event in this form, so a redelivery
is answered with what the first delivery was answered with.
"""

from __future__ import annotations

import base64
from typing import Any

from gateway.cloudevents import CloudEvent, attributes_as_text, event_from_attributes
from gateway.codecs import DataCodec, codec_for
from gateway.codecs.json import CODEC as JSON_CODEC


def event_to_json(event: CloudEvent) -> dict[str, Any]:
    """Every attribute as text; ``data`` as a JSON value, or binary as ``data_base64``."""
    document: dict[str, Any] = dict(attributes_as_text(event))
    data, codec = event.data, _binary_codec(event.datacontenttype)
    if isinstance(data, bytes | bytearray):
        document["data_base64"] = _base64(bytes(data))
    elif codec is not None:
        # Non-JSON data (msgpack) is binary in this format; kept encoded, it keeps its bytes.
        document["data_base64"] = _base64(codec.dumps(data))
    elif data is not None:
        # Dataclasses and the like become plain values, as the JSON data codec would send them.
        document["data"] = JSON_CODEC.converter.unstructure(data)
    return document


def event_from_json(document: dict[str, Any]) -> CloudEvent:
    """The event ``event_to_json`` stored (validated again on the way back).

    Binary data of a content type with a codec (msgpack) comes back decoded, which is how an
    incoming event of that type carries it; other binary data comes back as ``bytes``.
    """
    attributes = {
        name: value for name, value in document.items() if name not in ("data", "data_base64")
    }
    data = document.get("data")
    if "data_base64" in document:
        data = base64.b64decode(document["data_base64"], validate=True)
        codec = _binary_codec(attributes.get("datacontenttype"))
        if codec is not None:
            data = codec.loads(data)
    return event_from_attributes(attributes, data)


def _binary_codec(content_type: str | None) -> DataCodec | None:
    """The codec of a non-JSON content type that has one (msgpack), else ``None``."""
    codec = codec_for(content_type)
    return None if codec is None or codec is JSON_CODEC else codec


def _base64(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")
