"""A JSON Schema checker for the keywords the project's schemas use (draft 2020-12 subset).

For tests that hold a JSON Schema file against the code that implements it (the SFC and the
sequence recipe formats): ``schema_errors(document, schema)`` lists what does not follow the
schema, and ``unknown_keywords(schema)`` the keywords this checker would silently ignore (a test
asserts there are none). Local ``$ref`` only (``#/$defs/<name>``). Not a validator for production
input: the recipe plugins check recipes in code, with messages written for recipe authors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Recurse = Callable[[Any, Mapping[str, Any], str], list[str]]


def schema_errors(
    value: Any, schema: Mapping[str, Any], path: str = "$", *, root: Mapping[str, Any] | None = None
) -> list[str]:
    """What in ``value`` does not follow ``schema``, each ``"<path>: <problem>"`` (``$`` is
    ``value`` itself); empty when it follows it. ``root``: the document whose ``$defs`` a
    ``$ref`` names (default: ``schema``)."""
    definitions = (schema if root is None else root).get("$defs", {})

    def recurse(item: Any, inner: Mapping[str, Any], where: str) -> list[str]:
        if "$ref" in inner:
            return recurse(item, definitions[inner["$ref"].removeprefix("#/$defs/")], where)
        errors: list[str] = []
        for keyword, check in KEYWORDS.items():
            if keyword in inner:
                errors.extend(check(item, inner, where, recurse))
        return errors

    return recurse(value, schema, path)


def unknown_keywords(schema: Any) -> set[str]:
    """The keywords ``schema`` uses that this checker does not know (it would ignore them)."""
    if not isinstance(schema, Mapping):
        return set()
    found = set(schema) - KNOWN
    for key, item in schema.items():
        children = item.values() if key in ("properties", "$defs") else [item]
        if isinstance(item, list):
            children = item
        for child in children:
            found |= unknown_keywords(child)
    return found


def _type(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    kinds = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "null": type(None),
        "integer": int,
        "number": int | float,
    }
    for name in names:
        if isinstance(value, kinds[name]) and not (
            isinstance(value, bool) and name in ("integer", "number")
        ):
            return []
    return [f"{path}: not {names}"]


def _properties(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    if not isinstance(value, dict):
        return []
    errors = [f"{path}: missing {key}" for key in schema.get("required", ()) if key not in value]
    for key, item in value.items():
        if key in schema["properties"]:
            errors += recurse(item, schema["properties"][key], f"{path}.{key}")
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}: unexpected {key}")
    return errors


def _additional(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    extra = schema["additionalProperties"]
    if not isinstance(value, dict) or not isinstance(extra, dict) or "properties" in schema:
        return []
    return [e for k, v in value.items() for e in recurse(v, extra, f"{path}.{k}")]


def _items(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    if not isinstance(value, list):
        return []
    items = schema["items"]
    return [e for i, v in enumerate(value) for e in recurse(v, items, f"{path}[{i}]")]


BOUNDS: dict[str, tuple[Any, Any]] = {
    "minimum": (int | float, lambda v, limit: v >= limit),
    "exclusiveMinimum": (int | float, lambda v, limit: v > limit),
    "maximum": (int | float, lambda v, limit: v <= limit),
    "minItems": (list, lambda v, limit: len(v) >= limit),
    "minLength": (str, lambda v, limit: len(v) >= limit),
    "maxLength": (str, lambda v, limit: len(v) <= limit),
}


def _bound(keyword: str) -> Any:
    kind, holds = BOUNDS[keyword]

    def check(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
        applies = isinstance(value, kind) and not isinstance(value, bool)
        if applies and not holds(value, schema[keyword]):
            return [f"{path}: {keyword} {schema[keyword]}"]
        return []

    return check


def _enum(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    return [] if value in schema["enum"] else [f"{path}: {value!r} not in {schema['enum']}"]


def _const(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    return [] if value == schema["const"] else [f"{path}: not {schema['const']!r}"]


def _any_of(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    if any(not recurse(value, option, path) for option in schema["anyOf"]):
        return []
    return [f"{path}: matches no option"]


def _all_of(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    return [e for option in schema["allOf"] for e in recurse(value, option, path)]


def _if(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    branch = "then" if not recurse(value, schema["if"], path) else "else"
    return recurse(value, schema[branch], path) if branch in schema else []


def _not(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    return [f"{path}: must not match"] if not recurse(value, schema["not"], path) else []


def _pattern(value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse) -> list[str]:
    if isinstance(value, str) and not re.search(schema["pattern"], value):
        return [f"{path}: {value!r} does not match {schema['pattern']}"]
    return []


def _property_names(
    value: Any, schema: Mapping[str, Any], path: str, recurse: Recurse
) -> list[str]:
    keys = value if isinstance(value, dict) else {}
    return [e for key in keys for e in recurse(key, schema["propertyNames"], path)]


KEYWORDS = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional,
    "items": _items,
    **{keyword: _bound(keyword) for keyword in BOUNDS},
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "allOf": _all_of,
    "if": _if,
    "not": _not,
    "propertyNames": _property_names,
    "pattern": _pattern,
}
KNOWN = {
    *KEYWORDS,
    *("required", "then", "else"),
    *("$ref", "$defs", "$id", "$schema", "$comment", "title", "description", "default"),
}
