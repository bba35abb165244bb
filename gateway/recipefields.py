"""Reading the fields of recipe JSON, every problem named at its path, the same in every format.

A format checks a recipe before any job runs it and names every problem at once, each at its
element (``recipe.steps[1].par[0].timeout_seconds: must be > 0 ...``). ``Fields`` reads one JSON
object that way: each checker returns the field's value (its default when the field is absent),
or ``None`` after adding the problem to the list the caller collects::

    fields = Fields.read(step, "recipe.steps[0]", problems, {"name", "type_id", "max_attempts"})
    if fields is not None:
        name = fields.name("name")
        attempts = fields.attempts("max_attempts", 1)

So a field means the same, and a wrong one reads the same, in every format (sequences, SFC
pipelines, compensations, fan-outs, cycles). ``read_command`` reads the fields of a command
(an ``ActionSpec``'s) that an object may have.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from enum import Enum
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)

# A name is part of its command's correlation id ``{job}:{name}:{attempt}`` (and of a member
# run's ``{name}@{member}``): no colon, no at sign.
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
NAME_RULE = "1-64 letters, digits or _.- characters"
DEFAULT_TIMEOUT_SECONDS = 60.0  # a command never waits forever
# A command's fields, as ``gateway.formats.ActionSpec`` has them, and their defaults.
COMMAND_DEFAULTS: dict[str, Any] = {
    "name": None,  # required
    "type_id": None,  # required
    "equipment": None,  # None: routed by type
    "parameters": {},
    "timeout_seconds": DEFAULT_TIMEOUT_SECONDS,
    "max_attempts": 1,
    "backoff_seconds": 0.0,
    "side_effects": True,
}


class Fields:
    """The fields of one recipe JSON object at ``where``; problems go to ``problems``."""

    def __init__(
        self, value: Mapping[str, Any], where: str, problems: list[str], known: Collection[str]
    ) -> None:
        self.value, self.where, self.problems, self.known = value, where, problems, known
        self._before = len(problems)
        self._reported: set[str] = set()  # one problem per field (``require``)
        allowed = ", ".join(sorted(known))
        for key in value:
            if key not in known:
                problems.append(f"{where}: unknown field {key!r} (fields: {allowed})")

    @classmethod
    def read(
        cls,
        value: Any,
        where: str,
        problems: list[str],
        known: Collection[str],
        what: str = "a JSON object",
    ) -> Fields | None:
        """The fields of ``value``, or ``None`` when it is no JSON object (``what`` it must be)."""
        if not isinstance(value, Mapping):
            problems.append(f"{where}: must be {what}")
            return None
        return cls(value, where, problems, known)

    @property
    def ok(self) -> bool:
        """Whether no problem was found in this object (its unknown fields included)."""
        return len(self.problems) == self._before

    def path(self, key: str) -> str:
        return f"{self.where}.{key}"

    def problem(self, key: str, reason: str) -> None:
        """A problem of the field ``key`` (one the checkers here do not know)."""
        if key not in self._reported:
            self.problems.append(f"{self.path(key)}: {reason}")
            self._reported.add(key)

    def require(self, *keys: str) -> None:
        """Each of ``keys`` that is absent is a problem, ``required``, and only that."""
        for key in keys:
            if key not in self.value:
                self.problem(key, "required")

    def _bad(self, key: str, what: str, value: Any) -> None:
        self.problem(key, f"must be {what}, got {value!r}")

    def text(self, key: str, default: Any = None, *, optional: bool = False) -> str | None:
        """A non-empty string (``optional``: absent is ``None``, no problem)."""
        value = self.value.get(key, default)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            self._bad(key, "a non-empty string", value)
            return None
        return value

    def name(self, key: str = "name", default: Any = None) -> str | None:
        """A name: part of correlation ids, so letters, digits and ``_.-`` only."""
        value = self.value.get(key, default)
        if not isinstance(value, str) or not NAME.match(value):
            self._bad(key, NAME_RULE, value)
            return None
        return value

    def seconds(
        self, key: str, default: Any, *, zero: bool = False, maximum: float | None = None
    ) -> float | None:
        """A number of seconds: > 0, a wait (every command waits a bounded time); ``zero``:
        >= 0, a delay (a backoff: 0 is at once); at most ``maximum``."""
        value = self.value.get(key, default)
        bound = ">= 0" if zero else "> 0"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            self._bad(key, f"a number of seconds {bound}", value)
        elif value < 0 or (value == 0 and not zero):
            self._bad(key, bound if zero else "> 0 (every command waits a bounded time)", value)
        elif maximum is not None and value > maximum:
            self._bad(key, f"<= {maximum:g}", value)
        else:
            return float(value)
        return None

    def whole(
        self, key: str, default: Any, minimum: int = 1, maximum: int | None = None
    ) -> int | None:
        """A whole number from ``minimum`` (to ``maximum``); ``true`` is none."""
        value = self.value.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            fits = False
        else:
            fits = value >= minimum and (maximum is None or value <= maximum)
        if not fits:
            span = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            self._bad(key, f"a whole number {span}", value)
            return None
        return int(value)

    def attempts(self, key: str = "max_attempts", default: Any = 1) -> int | None:
        """How often something is tried: a whole number >= 1."""
        return self.whole(key, default)

    def flag(self, key: str, default: bool) -> bool | None:
        value = self.value.get(key, default)
        if not isinstance(value, bool):
            self.problem(key, "must be true or false")
            return None
        return value

    def choice(self, key: str, kind: type[E], default: Any) -> E | None:
        """One of the values of the enum ``kind``."""
        value = self.value.get(key, default)
        try:
            return kind(value)
        except ValueError:
            choices = " or ".join(repr(member.value) for member in kind)
            self._bad(key, choices, value)
            return None

    def mapping(self, key: str = "parameters") -> dict[str, Any] | None:
        """A JSON object (absent: empty), e.g. a command's free-form ``parameters``."""
        value = self.value.get(key, {})
        if not isinstance(value, Mapping):
            self.problem(key, "must be a JSON object")
            return None
        return dict(value)

    def items(self, key: str, what: str) -> list[Any] | None:
        """A non-empty list (of ``what``)."""
        value = self.value.get(key)
        if not isinstance(value, list) or not value:
            self._bad(key, f"a non-empty list of {what}", value)
            return None
        return value


def read_command(
    fields: Fields, defaults: Mapping[str, Any] = {}, *, longest: float | None = None
) -> dict[str, Any]:
    """The command fields (``COMMAND_DEFAULTS``) that ``fields``' object may have (its
    ``known``), read in that order, as ``ActionSpec`` takes them; ``defaults`` replace the
    usual ones (the recipe's default timeout), ``longest`` bounds the timeout. A field with a
    problem is ``None``: build the spec only if ``fields.ok``."""
    found: dict[str, Any] = {}
    for key, usual in COMMAND_DEFAULTS.items():
        if key not in fields.known:
            continue
        default = defaults.get(key, usual)
        if key == "name":
            found[key] = fields.name(key, default)
        elif key == "type_id":
            found[key] = fields.text(key, default)
        elif key == "equipment":
            found[key] = fields.text(key, default, optional=True)
        elif key == "parameters":
            found[key] = fields.mapping(key)
        elif key == "max_attempts":
            found[key] = fields.attempts(key, default)
        elif key == "side_effects":
            found[key] = fields.flag(key, default)
        else:
            wait = key == "timeout_seconds"
            found[key] = fields.seconds(
                key, default, zero=not wait, maximum=longest if wait else None
            )
    return found
