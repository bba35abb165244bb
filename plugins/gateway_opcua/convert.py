"""OPC UA values <-> their JSON form (what ``gateway.jobmethods`` speaks).

The JSON form of the ISA-95 structures uses the information model's own field names
(``JobOrderID``, ``StateText``...), so a structure converts field by field, by name, with the
type hints of the classes asyncua generated from the NodeSets. A few OPC UA types have a
different JSON shape: DateTime is RFC 3339 text, NodeId its string form (``i=47``),
QualifiedName ``ns:Name`` (a bare ``Name`` is in the namespace of the names the caller
gives: the ISA-95 namespace for the job structures, whose browse paths name ISA-95's state
machines), a free ``Value`` (BaseDataType) a JSON
value; a JSON object or mixed array in a ``Value`` becomes JSON text, as OPC UA has no such type.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import types
import typing
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from asyncua import ua

log = logging.getLogger(__name__)

_ENCODING = "Encoding"  # asyncua's optional-fields mask: computed when encoded, never JSON
_INTEGER_RANGES: dict[type[Any], tuple[int, int]] = {
    ua.Int16: (-(2**15), 2**15 - 1),
    ua.UInt16: (0, 2**16 - 1),
    ua.Int32: (-(2**31), 2**31 - 1),
    ua.UInt32: (0, 2**32 - 1),
    ua.Byte: (0, 255),
    ua.SByte: (-128, 127),
}


class ConversionError(ValueError):
    """A value that does not fit its OPC UA type; ``path`` names the field."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path


def ua_type(name: str) -> type[Any]:
    """An asyncua type by name; the ISA-95 structures exist once the NodeSets are loaded."""
    kind = getattr(ua, name)
    assert isinstance(kind, type), name
    return kind


# -- OPC UA -> JSON --------------------------------------------------------------------------


def to_json(value: Any, names: int = 0) -> Any:
    """The JSON form of an OPC UA value (fields left empty are omitted, as OPC JSON does);
    a QualifiedName in namespace ``names`` is written bare."""
    if value is None or isinstance(value, bool | str):
        return str(value) if isinstance(value, str) else value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, int | float):
        return value
    if isinstance(value, datetime):
        return _format_time(value)
    if isinstance(value, ua.Variant):
        return to_json(value.Value, names)
    if isinstance(value, ua.NodeId):
        return value.to_string()
    if isinstance(value, ua.QualifiedName):
        return value.Name if value.NamespaceIndex == names else value.to_string()
    if isinstance(value, list | tuple):
        return [to_json(item, names) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            spec.name: to_json(getattr(value, spec.name), names)
            for spec in dataclasses.fields(value)
            if spec.name != _ENCODING
        }
        return {name: item for name, item in fields.items() if item is not None}
    return value  # bytes and the like: the job model refuses them, naming the field


def _format_time(value: datetime) -> str:
    if value.tzinfo is None:  # asyncua's DateTimes are UTC without tzinfo
        value = value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")


# -- JSON -> OPC UA --------------------------------------------------------------------------


def from_json(value: Any, kind: Any, path: str = "value", names: int = 0) -> Any:
    """``value`` (JSON) as an instance of ``kind``, an asyncua type or type hint; a bare
    QualifiedName (no ``ns:``) is in namespace ``names``."""
    origin = typing.get_origin(kind)
    if origin is typing.Union or origin is types.UnionType:
        if value is None:
            return None
        [inner] = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        return from_json(value, inner, path, names)
    if origin is list:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConversionError(path, "expected an array")
        [inner] = typing.get_args(kind)
        return [
            from_json(item, inner, f"{path}[{index}]", names) for index, item in enumerate(value)
        ]
    if kind is ua.Variant:
        return variant(value)
    if value is None:
        return None
    return _scalar(value, kind, path, names)


def _scalar(value: Any, kind: Any, path: str, names: int) -> Any:
    if isinstance(kind, type) and issubclass(kind, datetime):
        return _parse_time(value, path)
    if kind is ua.NodeId:
        return ua.NodeId.from_string(_expect(value, str, path))
    if kind is ua.QualifiedName:
        return _qualified_name(_expect(value, str, path), names)
    if kind is ua.LocalizedText:
        if not isinstance(value, dict):
            raise ConversionError(path, "expected an object with Locale and Text")
        text, locale = value.get("Text"), value.get("Locale")
        return ua.LocalizedText(
            Text=None if text is None else _expect(text, str, f"{path}.Text"),
            Locale=None if locale is None else _expect(locale, str, f"{path}.Locale"),
        )
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _structure(value, kind, path, names)
    if kind is ua.Boolean or kind is bool:
        return _expect(value, bool, path)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(_expect(value, int, path))
    if isinstance(kind, type) and issubclass(kind, int):
        number = _expect(value, int, path)
        low, high = _INTEGER_RANGES.get(kind, (-(2**63), 2**64 - 1))
        if not low <= number <= high:  # kept within the OPC UA type, and said so in the log
            log.warning("%s: %d does not fit %s; sent as %d", path, number, kind.__name__, high)
            number = max(low, min(high, number))
        return number
    if isinstance(kind, type) and issubclass(kind, float):
        return float(_expect(value, int | float, path))
    if isinstance(kind, type) and issubclass(kind, str):
        return _expect(value, str, path)
    raise ConversionError(path, f"no conversion to {kind!r}")


def _qualified_name(text: str, names: int) -> ua.QualifiedName:
    namespace, separator, name = text.partition(":")
    if separator and namespace.isdigit():
        return ua.QualifiedName(name, int(namespace))
    return ua.QualifiedName(text, names)


def _structure(value: Any, kind: type[Any], path: str, names: int) -> Any:
    if not isinstance(value, dict):
        raise ConversionError(path, "expected an object")
    hints = _hints(kind)
    known = {spec.name for spec in dataclasses.fields(kind)}
    arguments = {
        name: from_json(item, hints[name], f"{path}.{name}", names)
        for name, item in value.items()
        if name in known and name != _ENCODING and item is not None  # None: the default
    }
    return kind(**arguments)


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(kind: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(kind)
    if hints is None:
        try:  # generated structures resolve their own names (``_dep_0``: the class namespace)
            hints = typing.get_type_hints(kind)
        except NameError:  # built-in ones say ``ua.X`` in a module that never imports ``ua``
            hints = typing.get_type_hints(kind, localns={"ua": ua, **vars(ua)})
        _HINTS[kind] = hints
    return hints


def variant(value: Any) -> ua.Variant:
    """A JSON value as a Variant: text, Boolean, Int64, Double, arrays of one of them; an
    object or a mixed array as JSON text."""
    if value is None:
        return ua.Variant()
    scalar = _variant_type(value)
    if scalar is not None:
        return ua.Variant(value, scalar)
    if isinstance(value, list) and value:
        kinds = {_variant_type(item) for item in value}
        if len(kinds) == 1 and None not in kinds:
            [kind] = kinds
            return ua.Variant(value, kind)
    return ua.Variant(json.dumps(value, separators=(",", ":")), ua.VariantType.String)


def _variant_type(value: Any) -> ua.VariantType | None:
    if isinstance(value, bool):
        return ua.VariantType.Boolean
    if isinstance(value, int):
        return ua.VariantType.Int64
    if isinstance(value, float):
        return ua.VariantType.Double
    if isinstance(value, str):
        return ua.VariantType.String
    return None


def _expect(value: Any, kind: Any, path: str) -> Any:
    if isinstance(value, bool) and kind is not bool:
        raise ConversionError(path, "expected a number, got a boolean")
    if not isinstance(value, kind):
        raise ConversionError(path, f"expected {getattr(kind, '__name__', kind)}")
    return value


def _parse_time(value: Any, path: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(_expect(value, str, path))
    except ValueError:
        raise ConversionError(path, "expected an RFC 3339 date-time") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed
