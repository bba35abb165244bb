"""CloudEvents as MessagePack maps (structured mode), the form they take in RPC params and results.

One map per event, like the CloudEvents JSON format: every set attribute under its name, with
string values (``time`` and ``expirytime`` as RFC 3339 text), except ``expiryinterval``, an
integer; and ``data`` under ``"data"`` as a MessagePack value of its own. ``data`` is carried as
the value itself whatever ``datacontenttype`` says, so a payload the gateway does not decode
travels as ``bin`` (``bytes``), exactly as ``gateway.cloudevents`` keeps it.

Decoding goes through the host's ``event_from_attributes``, so an RPC event is checked exactly
like an MQTT one and a bad attribute is named in the ``CloudEventError``.
"""

from __future__ import annotations

from typing import Any

from gateway.cloudevents import CloudEvent, attributes_as_text, event_from_attributes
from gateway.codecs.msgpack import CODEC
from gateway.errors import CloudEventError

_MAX_ATTRIBUTES = 64
_INTEGER_ATTRIBUTES = ("expiryinterval",)


def to_map(event: CloudEvent) -> dict[str, Any]:
    """The MessagePack map of ``event`` (validated first: only good events leave)."""
    event.validate()
    encoded: dict[str, Any] = dict(attributes_as_text(event))
    for name in _INTEGER_ATTRIBUTES:
        if name in encoded:
            encoded[name] = getattr(event, name)
    if event.data is not None:
        CODEC.dumps(event.data)  # a CloudEventError naming "data" now, not a TypeError later
        encoded["data"] = CODEC.converter.unstructure(event.data)
    return encoded


def from_map(value: Any) -> CloudEvent:
    """The event a decoded map carries; ``CloudEventError`` names the first bad attribute."""
    if not isinstance(value, dict):
        raise CloudEventError("event", f"must be a map of attributes, got {type(value).__name__}")
    if len(value) > _MAX_ATTRIBUTES + 1:
        raise CloudEventError("event", f"has more than {_MAX_ATTRIBUTES} attributes")
    attributes: dict[str, str] = {}
    for name, attribute in value.items():
        if not isinstance(name, str):
            raise CloudEventError(repr(name)[:40], "attribute names must be strings")
        if name != "data":
            attributes[name] = _attribute_text(name, attribute)
    return event_from_attributes(attributes, value.get("data"))


def _attribute_text(name: str, value: Any) -> str:
    if name in _INTEGER_ATTRIBUTES and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise CloudEventError(name[:40], f"must be a string, got {type(value).__name__}")
    return value
