"""The expression tree of a condition (``gateway.conditions``) and how it is evaluated.

A parsed condition is a tree of the frozen nodes below; ``evaluate_expression`` computes it
against a ``ConditionScope`` with three-valued logic (a value not there yet makes the condition
not enabled) and strict types. ``gateway.conditionparser`` turns text into such a tree and a
tree back into text; ``gateway.conditions`` is the API recipe formats use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from gateway.errors import ValidationError

if TYPE_CHECKING:
    from gateway.conditions import Condition

MAX_LENGTH = 2000  # characters of condition text
MAX_DEPTH = 50  # nested parentheses, ``not`` and unary minus

KEYWORDS = frozenset({"and", "or", "not", "true", "false", "null", "always"})
# Helpers over a fan-out's result, when followed by '(' (else plain names: an action may be
# called ``count``).
HELPERS = frozenset({"all", "any", "count"})
RESERVED = KEYWORDS | {"step", "params", "parameters"}

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
ADDITIVE = frozenset({"+", "-"})
MULTIPLICATIVE = frozenset({"*", "/", "%"})


def is_name(text: str) -> bool:
    """Whether ``text`` can be written as a bare name in a condition."""
    return NAME.fullmatch(text) is not None and text not in RESERVED


def element_name(text: str) -> str:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return f"condition {shown!r}"


class ConditionError(ValidationError):
    """A condition that does not parse, or that fails while it is evaluated.

    ``element`` is ``condition '<text>'`` unless the raiser names another element (the engine
    names the transition); ``reason`` says what is wrong, and where when parsing. ``action``
    is the action whose result lacks a field the condition reads, when that is the problem.
    """

    def __init__(self, element: str, reason: str, *, action: str | None = None) -> None:
        super().__init__(element, reason)
        self.action = action


def condition_error(text: str, reason: str) -> ConditionError:
    return ConditionError(element_name(text), reason)


# -- references --------------------------------------------------------------------------------

ReferenceKind = Literal["result", "parameter", "elapsed", "bare"]


@dataclass(frozen=True)
class Reference:
    """A name a condition uses: ``kind`` says where its value comes from.

    ``result``: ``name`` is the action, ``field`` the path in its result (at least one part,
    except in a helper, ``count(tighten)``);
    ``parameter``: ``name`` is the parameter ID, ``field`` a path inside its value;
    ``elapsed``: ``step.elapsed`` (``name`` ``"elapsed"``); ``bare``: a named condition or a
    result field of the source step.
    """

    kind: ReferenceKind
    name: str
    field: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.kind == "elapsed":
            return "step.elapsed"
        head = "params" + _segment(self.name) if self.kind == "parameter" else self.name
        return head + "".join(_segment(part) for part in self.field)


def _segment(part: str) -> str:
    return "." + part if NAME.fullmatch(part) else f"[{quote(part)}]"


# -- expression tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConditionScope:
    """What a condition may look at when the engine evaluates it."""

    results: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # action -> result
    parameters: Mapping[str, Any] = field(default_factory=dict)  # job + Work Master, by ID
    source_results: Mapping[str, Any] = field(default_factory=dict)  # source step's actions
    elapsed_seconds: float = 0.0  # how long the source step has been active
    named: Mapping[str, Condition] = field(default_factory=dict)  # the recipe's named conditions
    # Whether an action of the source step may still return results: until then a bare field
    # that is not there yet is waited for; afterwards it is an error.
    source_pending: bool = False
    # The source step's action a missing bare field is blamed on (its first with a result).
    source_action: str | None = None


class _Unavailable(Exception):
    """A referenced value is not there (yet): the condition is not enabled."""


class _Problem(Exception):
    """A type error or similar while evaluating: the recipe is wrong."""


class _Missing(_Problem):
    """A value that will never come: a field the result lacks, a parameter the job lacks."""

    def __init__(self, message: str, action: str | None) -> None:
        super().__init__(message)
        self.action = action


_UNAVAILABLE: Any = object()  # memo entry of a named condition whose value is not there yet


class _Context:
    __slots__ = ("memo", "scope", "visiting")

    def __init__(
        self, scope: ConditionScope, visiting: tuple[str, ...], memo: dict[str, Any]
    ) -> None:
        self.scope = scope
        self.visiting = visiting  # named conditions being evaluated, to stop cycles
        self.memo = memo  # named condition -> its value in this evaluation


class Expr:
    """A node of a parsed condition; ``compute`` returns its value in a context."""

    __slots__ = ()

    def compute(self, context: _Context) -> Any:
        raise NotImplementedError

    def references(self) -> Iterator[Reference]:
        yield from ()


@dataclass(frozen=True, slots=True)
class Const(Expr):
    value: bool | int | float | str | None

    def compute(self, context: _Context) -> Any:
        return self.value


@dataclass(frozen=True, slots=True)
class ResultRef(Expr):
    reference: Reference

    def compute(self, context: _Context) -> Any:
        action = self.reference.name
        result = context.scope.results.get(action)
        if result is None:
            raise _Unavailable
        return _descend(result, self.reference.field, f"the result of action {action!r}", action)

    def references(self) -> Iterator[Reference]:
        yield self.reference


@dataclass(frozen=True, slots=True)
class Members(Expr):
    """``all(tighten)``, ``any(tighten)``, ``count(tighten)`` over a fan-out's result (one entry
    per member, ``gateway.fanout``): whether every member succeeded, whether one did, how many
    did. A member that failed is an entry holding ``error``."""

    helper: str  # "all", "any" or "count"
    reference: Reference  # the action, and a path inside its result (may be empty)

    def compute(self, context: _Context) -> Any:
        action = self.reference.name
        result = context.scope.results.get(action)
        if result is None:
            raise _Unavailable
        value = _descend(result, self.reference.field, f"the result of action {action!r}", action)
        if not isinstance(value, Mapping) or not value:
            raise _Problem(
                f"{self.helper}({self.reference}) needs a fan-out's result (an object with "
                f"an entry per member), got {_kind(value)}"
            )
        succeeded = sum(
            1 for entry in value.values() if not (isinstance(entry, Mapping) and "error" in entry)
        )
        if self.helper == "count":
            return succeeded
        return succeeded == len(value) if self.helper == "all" else succeeded > 0

    def references(self) -> Iterator[Reference]:
        yield self.reference


@dataclass(frozen=True, slots=True)
class ParameterRef(Expr):
    reference: Reference

    def compute(self, context: _Context) -> Any:
        parameters = context.scope.parameters
        name = self.reference.name
        if name not in parameters:
            raise _Missing(f"the job has no parameter {name!r}{_listing(parameters)}", None)
        return _descend(parameters[name], self.reference.field, f"parameter {name!r}", None)

    def references(self) -> Iterator[Reference]:
        yield self.reference


@dataclass(frozen=True, slots=True)
class ElapsedRef(Expr):
    reference: ClassVar[Reference] = Reference("elapsed", "elapsed")

    def compute(self, context: _Context) -> Any:
        return context.scope.elapsed_seconds

    def references(self) -> Iterator[Reference]:
        yield self.reference


@dataclass(frozen=True, slots=True)
class NameRef(Expr):
    """A bare name: a named condition if the recipe has one, else a source result field."""

    reference: Reference

    def compute(self, context: _Context) -> Any:
        name = self.reference.name
        scope = context.scope
        named = scope.named.get(name)
        if named is None:
            return self.source_field(scope, name)
        value = context.memo.get(name)
        if value is _UNAVAILABLE:
            raise _Unavailable
        if value is not None:
            return value
        if name in context.visiting:
            cycle = " -> ".join((*context.visiting, name))
            raise _Problem(f"named condition {name!r} refers to itself ({cycle})")
        inner = _Context(scope, (*context.visiting, name), context.memo)
        try:
            value = _boolean(named.expression.compute(inner), f"named condition {name!r}")
        except _Unavailable:
            context.memo[name] = _UNAVAILABLE
            raise
        except _Missing as missing:
            raise _Missing(f"{missing} (in named condition {name!r})", missing.action) from None
        except _Problem as problem:
            raise _Problem(f"{problem} (in named condition {name!r})") from None
        context.memo[name] = value
        return value

    @staticmethod
    def source_field(scope: ConditionScope, name: str) -> Any:
        if name in scope.source_results:
            return scope.source_results[name]
        if scope.source_pending:
            raise _Unavailable
        raise _Missing(
            f"no result of the source step's actions has the field {name!r}"
            f"{_listing(scope.source_results)}",
            scope.source_action,
        )

    def references(self) -> Iterator[Reference]:
        yield self.reference


@dataclass(frozen=True, slots=True)
class Not(Expr):
    operand: Expr

    def compute(self, context: _Context) -> Any:
        return not _boolean(self.operand.compute(context), "the operand of 'not'")

    def references(self) -> Iterator[Reference]:
        return self.operand.references()


@dataclass(frozen=True, slots=True)
class Negate(Expr):
    operand: Expr

    def compute(self, context: _Context) -> Any:
        value = self.operand.compute(context)
        if not _is_number(value):
            raise _Problem(f"unary '-' needs a number, got {_kind(value)}")
        return -value

    def references(self) -> Iterator[Reference]:
        return self.operand.references()


@dataclass(frozen=True, slots=True)
class Logical(Expr):
    """``and`` / ``or`` over two or more operands, with three-valued logic.

    The first operand that decides (``false`` for ``and``, ``true`` for ``or``) wins; an
    operand whose value is missing only matters when no other operand decides.
    """

    operator: Literal["and", "or"]
    operands: tuple[Expr, ...]

    def compute(self, context: _Context) -> Any:
        decisive = self.operator == "or"
        missing = False
        for operand in self.operands:
            try:
                value = operand.compute(context)
            except _Unavailable:
                missing = True
                continue
            if _boolean(value, f"an operand of '{self.operator}'") is decisive:
                return decisive
        if missing:
            raise _Unavailable
        return not decisive

    def references(self) -> Iterator[Reference]:
        for operand in self.operands:
            yield from operand.references()


@dataclass(frozen=True, slots=True)
class Compare(Expr):
    """``a < b <= c``: each neighbouring pair compared, left to right, stopping at ``false``."""

    operands: tuple[Expr, ...]
    operators: tuple[str, ...]

    def compute(self, context: _Context) -> Any:
        left = self.operands[0].compute(context)
        for operator, operand in zip(self.operators, self.operands[1:], strict=True):
            right = operand.compute(context)
            if not _compare(operator, left, right):
                return False
            left = right
        return True

    def references(self) -> Iterator[Reference]:
        for operand in self.operands:
            yield from operand.references()


@dataclass(frozen=True, slots=True)
class Arithmetic(Expr):
    """``a + b - c`` or ``a * b / c``: applied left to right."""

    operands: tuple[Expr, ...]
    operators: tuple[str, ...]

    def compute(self, context: _Context) -> Any:
        value = self.operands[0].compute(context)
        for operator, operand in zip(self.operators, self.operands[1:], strict=True):
            value = _calculate(operator, value, operand.compute(context))
        return value

    def references(self) -> Iterator[Reference]:
        for operand in self.operands:
            yield from operand.references()


# -- values ------------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    """The JSON type name of a value, for messages and for ``==``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise _Problem(f"{what} must be true or false, got {_kind(value)}")
    return value


def _descend(value: Any, path: tuple[str, ...], what: str, action: str | None) -> Any:
    """``value``'s field at ``path``; ``_Missing`` naming the field when it is not there."""
    for depth, part in enumerate(path):
        where = what if depth == 0 else f"field {'.'.join(path[:depth])!r} of {what}"
        if not isinstance(value, Mapping):
            kind = _kind(value)
            shown = kind if kind == "null" else ("an " if kind[0] in "ao" else "a ") + kind
            raise _Missing(f"{where} is {shown}, not an object with the field {part!r}", action)
        if part not in value:
            raise _Missing(f"{where} has no field {part!r}{_listing(value)}", action)
        value = value[part]
    return value


def _listing(mapping: Mapping[str, Any]) -> str:
    """`` (it has: a, b)``: what is there, so a misspelt name is easy to spot."""
    names = sorted(map(str, mapping))
    if not names:
        return " (it has none)"
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    return f" (it has: {shown})"


def _equal(left: Any, right: Any) -> bool:
    kind = _kind(left)
    if kind != _kind(right):
        return False
    if kind == "array":
        return len(left) == len(right) and all(map(_equal, left, right))
    if kind == "object":
        return left.keys() == right.keys() and all(_equal(left[k], right[k]) for k in left)
    return bool(left == right)


def _compare(operator: str, left: Any, right: Any) -> bool:
    if operator == "==":
        return _equal(left, right)
    if operator == "!=":
        return not _equal(left, right)
    if not (_is_number(left) and _is_number(right)) and not (
        isinstance(left, str) and isinstance(right, str)
    ):
        raise _Problem(f"cannot compare {_kind(left)} with {_kind(right)} using '{operator}'")
    if operator == "<":
        return bool(left < right)
    if operator == "<=":
        return bool(left <= right)
    if operator == ">":
        return bool(left > right)
    return bool(left >= right)


def _calculate(operator: str, left: Any, right: Any) -> Any:
    if operator == "+" and isinstance(left, str) and isinstance(right, str):
        return left + right
    if not (_is_number(left) and _is_number(right)):
        raise _Problem(f"'{operator}' needs two numbers, got {_kind(left)} and {_kind(right)}")
    try:
        if operator == "+":
            return left + right
        if operator == "-":
            return left - right
        if operator == "*":
            return left * right
        if operator == "/":
            return left / right
        return left % right
    except ZeroDivisionError:
        raise _Problem(f"division by zero in '{operator}'") from None
    except OverflowError:
        raise _Problem(f"number too large in '{operator}'") from None


def evaluate_expression(expression: Expr, scope: ConditionScope, *, text: str = "") -> bool:
    """Evaluate a parsed expression; ``text`` names it in errors."""
    try:
        value = expression.compute(_Context(scope, (), {}))
    except _Unavailable:
        return False
    except _Missing as missing:
        raise ConditionError(element_name(text), str(missing), action=missing.action) from None
    except _Problem as problem:
        raise condition_error(text, str(problem)) from None
    except RecursionError:
        raise condition_error(text, "named conditions nested too deeply") from None
    if not isinstance(value, bool):
        raise condition_error(text, f"must evaluate to true or false, got {_kind(value)}")
    return value


def subexpressions(expression: Expr) -> tuple[Expr, ...]:
    """The direct operands of a node (none for literals and references)."""
    if isinstance(expression, Not | Negate):
        return (expression.operand,)
    if isinstance(expression, Logical | Compare | Arithmetic):
        return expression.operands
    return ()


def quote(value: str) -> str:
    """``value`` as a double-quoted condition string literal."""
    out = ['"']
    for char in value:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F or 0xD800 <= ord(char) <= 0xDFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)
