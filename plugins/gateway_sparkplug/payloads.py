"""Sparkplug B payloads: typed metric values in, protobuf bytes out (and NCMD back in).

A metric's value goes to the oneof member its data type calls for (Sparkplug 3.0, 6.4.16):
32-bit and smaller integers in ``int_value`` (signed ones as two's complement), 64-bit ones
and DateTime (milliseconds since the epoch) in ``long_value``, text in ``string_value``. A
``None`` value is sent as ``is_null`` with the data type kept, as the specification asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from gateway_sparkplug.schema import DataType, Payload

_INT32 = frozenset({DataType.INT8, DataType.INT16, DataType.INT32})
_UINT32 = frozenset({DataType.UINT8, DataType.UINT16, DataType.UINT32})
_LONG = frozenset({DataType.INT64, DataType.UINT64, DataType.DATETIME})
_TEXT = frozenset({DataType.STRING, DataType.TEXT, DataType.UUID})


@dataclass(frozen=True)
class Value:
    """A metric's data type and value (``None``: null)."""

    datatype: DataType
    value: bool | int | float | str | None


@dataclass(frozen=True)
class Metric:
    """One metric of a message: its name (births), alias, timestamp (ms) and value."""

    alias: int | None
    value: Value
    timestamp: int
    name: str | None = None


def encode(metrics: Sequence[Metric], *, timestamp: int, seq: int | None) -> bytes:
    """The payload of one message; ``seq`` ``None`` for NDEATH, which carries none."""
    payload = Payload(timestamp=timestamp)
    if seq is not None:
        payload.seq = seq
    for metric in metrics:
        entry = payload.metrics.add(timestamp=metric.timestamp)
        if metric.alias is not None:
            entry.alias = metric.alias
        entry.datatype = int(metric.value.datatype)
        if metric.name is not None:
            entry.name = metric.name
        _set_value(entry, metric.value)
    data: bytes = payload.SerializeToString()
    return data


def _set_value(entry: Any, value: Value) -> None:
    kind, raw = value.datatype, value.value
    if raw is None:
        entry.is_null = True
    elif kind is DataType.BOOLEAN:
        entry.boolean_value = bool(raw)
    elif kind in _INT32:
        entry.int_value = int(raw) & 0xFFFF_FFFF
    elif kind in _UINT32:
        entry.int_value = int(raw)
    elif kind in _LONG:
        entry.long_value = int(raw) & 0xFFFF_FFFF_FFFF_FFFF
    elif kind is DataType.FLOAT:
        entry.float_value = float(raw)
    elif kind is DataType.DOUBLE:
        entry.double_value = float(raw)
    elif kind in _TEXT:
        entry.string_value = str(raw)
    else:
        raise ValueError(f"data type {kind.name} is not one the gateway publishes")


@dataclass(frozen=True)
class Command:
    """A metric of an NCMD: by name or alias, with its value (as decoded)."""

    name: str | None
    alias: int | None
    value: Any


class BadPayload(ValueError):
    """Bytes that are no Sparkplug B payload."""


def decode_commands(data: bytes) -> list[Command]:
    """The metrics of an NCMD payload; ``BadPayload`` when it does not decode."""
    payload = Payload()
    try:
        payload.ParseFromString(data)
    except DecodeError as error:
        raise BadPayload(str(error)) from None
    commands = []
    for metric in payload.metrics:
        member = metric.WhichOneof("value")
        commands.append(
            Command(
                metric.name if metric.HasField("name") else None,
                metric.alias if metric.HasField("alias") else None,
                None if member is None else getattr(metric, member),
            )
        )
    return commands
