"""The CloudEvent model (CloudEvents 1.0) with the extensions the gateway uses.

A ``CloudEvent`` carries its ``data`` decoded (JSON/msgpack values, or raw ``bytes`` for other
content types); the wire formats in ``gateway.codecs`` turn it into bytes and back. Every way of
building one from outside input goes through ``validate`` so a bad attribute is reported by name.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway.errors import CloudEventError
from gateway.mediatypes import JSON, MSGPACK, data_format

__all__ = ["JSON", "MSGPACK", "CloudEvent"]

SPEC_VERSION = "1.0"

# Attribute names the model knows; anything else is kept in ``extensions``.
CORE_ATTRIBUTES = ("specversion", "id", "source", "type")
OPTIONAL_ATTRIBUTES = ("subject", "time", "datacontenttype", "dataschema")
EXTENSION_ATTRIBUTES = (
    "correlationid",
    "causationid",
    "expiryinterval",
    "expirytime",
    "method",
    "traceparent",
    "tracestate",
    "errorcode",
    "errormessage",
)
KNOWN_ATTRIBUTES = CORE_ATTRIBUTES + OPTIONAL_ATTRIBUTES + EXTENSION_ATTRIBUTES
CONFIG_METHODS = ("PUT", "DELETE")

# The text attributes an event may leave out (checked by ``validate`` when set).
_OPTIONAL_TEXT = (
    "subject",
    "datacontenttype",
    "dataschema",
    "correlationid",
    "causationid",
    "tracestate",
    "errorcode",
    "errormessage",
)
_ATTRIBUTE_NAME = re.compile(r"^[a-z0-9]{1,20}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_MAX_STRING = 4096


def new_event_id() -> str:
    return str(uuid.uuid4())


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class CloudEvent:
    """One CloudEvent. Construct it with keyword arguments; ``validate`` checks the contract."""

    type: str
    source: str
    id: str = field(default_factory=new_event_id)
    specversion: str = SPEC_VERSION
    subject: str | None = None
    time: datetime | None = None
    datacontenttype: str | None = None
    dataschema: str | None = None
    data: Any = None
    # Extensions (CloudEvents extension attributes used by the gateway)
    correlationid: str | None = None
    causationid: str | None = None
    expiryinterval: int | None = None
    expirytime: datetime | None = None
    method: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    errorcode: str | None = None
    errormessage: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)

    def validate(self) -> CloudEvent:
        """Check every attribute; raise ``CloudEventError`` naming the first bad one."""
        if self.datacontenttype == "":
            raise CloudEventError("datacontenttype", "must not be empty (an RFC 2046 media type)")
        if self.specversion != SPEC_VERSION:
            raise CloudEventError("specversion", f"must be {SPEC_VERSION!r}")
        for name in ("id", "source", "type"):
            _check_text(name, getattr(self, name), required=True)
        for name in _OPTIONAL_TEXT:
            value = getattr(self, name)
            if value is not None:  # most are not set: no call for them
                _check_text(name, value, required=False)
        for name in ("time", "expirytime"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise CloudEventError(name, "must be a timestamp with a time zone (RFC 3339)")
        if self.expiryinterval is not None and (
            isinstance(self.expiryinterval, bool)
            or not isinstance(self.expiryinterval, int)
            or not 0 <= self.expiryinterval <= 0xFFFFFFFF
        ):
            raise CloudEventError("expiryinterval", "must be an integer number of seconds >= 0")
        if self.method is not None and self.method not in CONFIG_METHODS:
            raise CloudEventError("method", f"must be one of {', '.join(CONFIG_METHODS)}")
        if self.traceparent is not None and not _TRACEPARENT.fullmatch(str(self.traceparent)):
            raise CloudEventError("traceparent", "must be a W3C traceparent header value")
        for name, value in self.extensions.items():
            if not isinstance(name, str) or not _ATTRIBUTE_NAME.fullmatch(name):
                raise CloudEventError(
                    str(name)[:40], "extension names are 1-20 lowercase letters or digits"
                )
            if name in KNOWN_ATTRIBUTES or name == "data":
                raise CloudEventError(name, "is a known attribute, not an extension")
            _check_text(name, value, required=False)
        return self

    @property
    def scope(self) -> str | None:
        """The station scope a command addresses (the CloudEvent ``subject``)."""
        return self.subject

    def replace(self, **changes: Any) -> CloudEvent:
        return dataclasses.replace(self, **changes)

    def reply(self, *, source: str, data: Any = None, type: str | None = None) -> CloudEvent:
        """Build the reply to this event: same type (unless given), subject and correlation."""
        return CloudEvent(
            type=type or self.type,
            source=source,
            subject=self.subject,
            time=utc_now(),
            datacontenttype=self._reply_content_type(),
            data=data,
            correlationid=self.correlationid or self.id,
            causationid=self.id,
            traceparent=self.traceparent,
        )

    def _reply_content_type(self) -> str:
        """The request's content type when replies can be encoded in it, else JSON."""
        if self.datacontenttype and data_format(self.datacontenttype) is not None:
            return self.datacontenttype
        return JSON

    def error_reply(self, *, source: str, code: str, message: str) -> CloudEvent:
        """Build a reply saying this event could not be processed, and why."""
        # The message may quote the bad input; it must still be sendable.
        message = mqtt_safe_text(message)
        return self.reply(source=source, data={"error": code, "message": message}).replace(
            datacontenttype=JSON, errorcode=code, errormessage=message[:_MAX_STRING]
        )

    def attributes(self) -> dict[str, Any]:
        """Every attribute that is set (context attributes only, not ``data``)."""
        values: dict[str, Any] = {}
        for name in KNOWN_ATTRIBUTES:
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        values.update(self.extensions)
        return values


def _check_text(name: str, value: object, *, required: bool) -> None:
    if value is None:
        if required:
            raise CloudEventError(name, "is required")
        return
    if not isinstance(value, str):
        raise CloudEventError(name, "must be a string")
    if required and not value:
        raise CloudEventError(name, "must not be empty")
    if len(value) > _MAX_STRING:
        raise CloudEventError(name, f"is longer than {_MAX_STRING} characters")
    if not _is_mqtt_text(value):
        raise CloudEventError(name, "must be UTF-8 text without U+0000 or U+FEFF (MQTT strings)")


def _is_mqtt_text(value: str) -> bool:
    """MQTT strings are UTF-8 without NUL: brokers drop clients that send anything else. U+FEFF
    is allowed by MQTT, but paho (and so many an MES) refuses a packet that holds it and drops the
    connection: an event with it would never be read. The gateway reads such a packet
    (``gateway_mqtt.decoding``) and refuses the event here, naming the attribute."""
    if value.isascii():  # nearly every attribute: UTF-8 already, and no U+FEFF
        return "\x00" not in value
    if "\x00" in value or "\ufeff" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. decoded from JSON "\ud800"
        return False
    return True


def mqtt_safe_text(value: str) -> str:
    """``value`` with what MQTT strings cannot carry (or paho cannot read) replaced by U+FFFD."""
    safe = value.encode("utf-8", "replace").decode()
    return safe.replace("\x00", "\ufffd").replace("\ufeff", "\ufffd")


def format_time(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def parse_time(name: str, text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, TypeError):
        raise CloudEventError(name, f"is not an RFC 3339 timestamp: {text[:40]!r}") from None
    if value.tzinfo is None:
        raise CloudEventError(name, "must carry a time zone offset (RFC 3339)")
    return value


def parse_expiry_interval(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        raise CloudEventError("expiryinterval", f"must be a number of seconds, got {text[:40]!r}")
    return int(text)


def event_from_attributes(attributes: Mapping[str, str], data: Any) -> CloudEvent:
    """Build and validate an event from string attributes (as carried by a wire format)."""
    known: dict[str, Any] = {}
    extensions: dict[str, str] = {}
    for name, value in attributes.items():
        if name in KNOWN_ATTRIBUTES:
            known[name] = value
        else:
            extensions[name] = value
    for name in CORE_ATTRIBUTES:
        if name not in known:
            raise CloudEventError(name, "is required")
    for name in ("time", "expirytime"):
        if name in known:
            known[name] = parse_time(name, known[name])
    if "expiryinterval" in known:
        known["expiryinterval"] = parse_expiry_interval(known["expiryinterval"])
    return CloudEvent(**known, extensions=extensions, data=data).validate()


def attributes_as_text(event: CloudEvent) -> dict[str, str]:
    """Every set attribute as a string, the way header-based wire formats carry them (those of
    ``CloudEvent.attributes``, in its order: one pass, as every message sent asks)."""
    text: dict[str, str] = {}
    for name in KNOWN_ATTRIBUTES:
        value = getattr(event, name)
        if value is None:
            continue
        if type(value) is str:
            text[name] = value
        elif isinstance(value, datetime):
            text[name] = format_time(value)
        else:
            text[name] = str(value)
    for name, value in event.extensions.items():
        text[name] = str(value)
    return text
