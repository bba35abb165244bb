"""Conditions: a small, safe expression language (no ``eval``), for every recipe format.

SFC transitions and the conditions and assertions of sequence steps are written in it. A
condition is text from the recipe, so it is parsed by a tokenizer and a recursive-descent
parser into a small tree of frozen dataclasses, once; the engine then evaluates that tree every
time it checks a transition. Nothing in a condition can call Python code.

Grammar, lowest precedence first::

    condition  := or
    or         := and (("or" | "||") and)*
    and        := not (("and" | "&&") not)*
    not        := ("not" | "!") not | comparison
    comparison := sum (("==" | "!=" | "<" | "<=" | ">" | ">=") sum)*
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/" | "%") unary)*
    unary      := "-" unary | primary
    primary    := number | string | "true" | "false" | "null" | "always"
                | "(" condition ")" | helper | reference
    helper     := ("all" | "any" | "count") "(" reference ")"
    reference  := name ("." name | "[" string "]")*

- Numbers: ``12``, ``1.5``, ``2e-3``. Strings: ``'single'`` or ``"double"`` quoted, with the
  escapes ``\\\\ \\' \\" \\n \\r \\t \\0 \\uXXXX``. ``always`` is the literal ``true``.
- Names are ASCII letters, digits and ``_`` (not starting with a digit); ``-`` is never part of
  a name, so ``a-b`` is a subtraction. After ``.`` any name is a field, keywords included; a
  field that is not a name is written ``["torque-spec"]``.
- Comparisons chain as in Python: ``80 <= tighten.torque <= 90`` means
  ``80 <= tighten.torque and tighten.torque <= 90``.

Helpers over a fan-out's result (one entry per member, ``gateway.fanout``): ``all(tighten)``
(every member succeeded), ``any(tighten)`` (one did), ``count(tighten)`` (how many did), also
of a path inside it (``count(per_slot)``); a member that failed is an entry holding ``error``.

References:

- ``<action>.<field>[.<subfield>...]``: a field of that action's result;
- ``params.<ID>`` (or ``parameters.<ID>``): a job / Work Master parameter, then optional fields;
- ``step.elapsed``: seconds the transition's source step (or branch) has been active;
- a bare ``name``: the recipe's named condition of that name (evaluated recursively), else the
  field of that name in the merged results of the source step's actions (``torque_ok``).

``step``, ``params`` and ``parameters`` are reserved and cannot name an action or a bare field.

Evaluation:

- A reference whose value is not there *yet* (an action without a result so far, a bare field
  while an action of the source step is still running) makes the condition *not enabled*:
  ``evaluate`` returns ``False``. ``and`` / ``or`` follow three-valued logic, so
  ``a.ok or b.ok`` is true as soon as either is, whichever arrived first, and ``not a.ok`` is
  not enabled while ``a.ok`` is missing.
- A value that will never come is an error, not a wait: a field the action's result does not
  have (``camera.printd`` when the camera sent ``printed``), a field inside a value that is not
  an object, a bare field none of the finished source actions returned, a parameter the job
  does not have. ``ConditionError`` names the field, and ``action`` the action whose result
  lacks it (so the engine can hold the job and retry that action).
- Named conditions are evaluated at most once per evaluation (memoised), so evaluation is
  linear in the size of the recipe's conditions however often they refer to each other.
- Types are strict (a recipe is a machine instruction, not a script): ``and``/``or``/``not``
  need booleans, ordering needs two numbers or two strings, ``+`` adds numbers or joins strings,
  ``- * / %`` need numbers, and the condition itself must come out ``true`` or ``false``.
  ``int`` and ``float`` compare with each other; booleans are not numbers; ``==`` between
  different types is ``false`` (``!=`` ``true``). A type error, a division by zero or a
  named-condition cycle raises ``ConditionError`` naming the condition: the engine fails the
  recipe rather than guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from gateway.errors import ValidationError

MAX_LENGTH = 2000  # characters of condition text
MAX_DEPTH = 50  # nested parentheses, ``not`` and unary minus

KEYWORDS = frozenset({"and", "or", "not", "true", "false", "null", "always"})
# Helpers over a fan-out's result, when followed by '(' (else plain names: an action may be
# called ``count``).
HELPERS = frozenset({"all", "any", "count"})
RESERVED = KEYWORDS | {"step", "params", "parameters"}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_OPERATORS = ("==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%")
_PUNCTUATION = ("(", ")", ".", "[", "]")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "0": "\0"}
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_ADDITIVE = frozenset({"+", "-"})
_MULTIPLICATIVE = frozenset({"*", "/", "%"})


def is_name(text: str) -> bool:
    """Whether ``text`` can be written as a bare name in a condition."""
    return _NAME.fullmatch(text) is not None and text not in RESERVED


def _element(text: str) -> str:
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


def _error(text: str, reason: str) -> ConditionError:
    return ConditionError(_element(text), reason)


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
    return "." + part if _NAME.fullmatch(part) else f"[{quote(part)}]"


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


# -- tokenizer ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: Literal["number", "string", "name", "op", "end"]
    text: str
    value: Any
    position: int  # index into the condition text

    def describe(self) -> str:
        if self.kind == "end":
            return "the end of the condition"
        return f"{self.kind} {self.text!r}" if self.kind != "op" else repr(self.text)


class _Tokenizer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0

    def error(self, problem: str, position: int) -> ConditionError:
        return _error(self.text, f"{problem} at position {position + 1}")

    def tokens(self) -> list[_Token]:
        tokens = []
        while (token := self.next()).kind != "end":
            tokens.append(token)
        tokens.append(token)
        return tokens

    def next(self) -> _Token:
        text = self.text
        while self.position < len(text) and text[self.position] in " \t\r\n":
            self.position += 1
        start = self.position
        if start >= len(text):
            return _Token("end", "", None, start)
        char = text[start]
        if char in "0123456789":
            return self.number(start)
        if char in "'\"":
            return self.string(start)
        if match := _NAME.match(text, start):
            self.position = match.end()
            return _Token("name", match.group(), match.group(), start)
        for operator in (*_OPERATORS, *_PUNCTUATION):
            if text.startswith(operator, start):
                self.position += len(operator)
                return _Token("op", operator, operator, start)
        hint = {"=": " (use '==')", "&": " (use 'and')", "|": " (use 'or')"}.get(char, "")
        raise self.error(f"unexpected character {char!r}{hint}", start)

    def number(self, start: int) -> _Token:
        match = _NUMBER.match(self.text, start)
        assert match is not None  # the caller saw a digit
        end = self.position = match.end()
        if end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
            raise self.error(f"unexpected {self.text[end]!r} after the number", end)
        text = match.group()
        value = float(text) if any(c in text for c in ".eE") else int(text)
        return _Token("number", text, value, start)

    def string(self, start: int) -> _Token:
        text, quote_char = self.text, self.text[start]
        parts: list[str] = []
        index = start + 1
        while index < len(text) and text[index] != quote_char:
            if text[index] != "\\":
                parts.append(text[index])
                index += 1
                continue
            escape = text[index + 1 : index + 2]
            if escape == "u":
                digits = text[index + 2 : index + 6]
                if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                    raise self.error("'\\u' needs four hex digits", index)
                parts.append(chr(int(digits, 16)))
                index += 6
            elif escape in _ESCAPES and escape:
                parts.append(_ESCAPES[escape])
                index += 2
            else:
                raise self.error(f"unknown escape {chr(92) + escape!r}", index)
        if index >= len(text):
            raise self.error("unterminated string", start)
        self.position = index + 1
        return _Token("string", text[start : index + 1], "".join(parts), start)


# -- parser ------------------------------------------------------------------------------------


class _Parser:
    """Recursive descent over the tokens; one method per grammar rule."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _Tokenizer(text).tokens()
        self.index = 0
        self.depth = 0

    def error(self, problem: str, token: _Token) -> ConditionError:
        return _error(self.text, f"{problem} at position {token.position + 1}")

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def accept(self, *texts: str) -> _Token | None:
        token = self.peek()
        if token.kind in ("op", "name") and token.text in texts:
            return self.take()
        return None

    def expect(self, text: str, what: str) -> None:
        if self.accept(text) is None:
            raise self.error(f"expected {what}, found {self.peek().describe()}", self.peek())

    def nest(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH} levels", token)

    def parse(self) -> Expr:
        if self.peek().kind == "end":
            raise self.error("empty condition", self.peek())
        expression = self.or_()
        if self.peek().kind != "end":
            raise self.error(f"unexpected {self.peek().describe()}", self.peek())
        return expression

    def or_(self) -> Expr:
        operands = [self.and_()]
        while self.accept("or", "||"):
            operands.append(self.and_())
        return operands[0] if len(operands) == 1 else Logical("or", tuple(operands))

    def and_(self) -> Expr:
        operands = [self.not_()]
        while self.accept("and", "&&"):
            operands.append(self.not_())
        return operands[0] if len(operands) == 1 else Logical("and", tuple(operands))

    def not_(self) -> Expr:
        if token := self.accept("not", "!"):
            self.nest(token)
            operand = self.not_()
            self.depth -= 1
            return Not(operand)
        return self.comparison()

    def comparison(self) -> Expr:
        return self.chain(self.sum, _COMPARISONS, Compare)

    def sum(self) -> Expr:
        return self.chain(self.product, _ADDITIVE, Arithmetic)

    def product(self) -> Expr:
        return self.chain(self.unary, _MULTIPLICATIVE, Arithmetic)

    def chain(
        self,
        operand: Callable[[], Expr],
        operators: frozenset[str],
        node: type[Compare] | type[Arithmetic],
    ) -> Expr:
        operands: list[Expr] = [operand()]
        found: list[str] = []
        while self.peek().kind == "op" and self.peek().text in operators:
            found.append(self.take().text)
            operands.append(operand())
        return operands[0] if len(operands) == 1 else node(tuple(operands), tuple(found))

    def unary(self) -> Expr:
        if token := self.accept("-"):
            self.nest(token)
            operand = self.unary()
            self.depth -= 1
            return Negate(operand)
        return self.primary()

    def primary(self) -> Expr:
        token = self.take()
        if token.kind in ("number", "string"):
            return Const(token.value)
        if token.kind == "name":
            return self.name(token)
        if token.kind == "op" and token.text == "(":
            self.nest(token)
            expression = self.or_()
            self.expect(")", "')'")
            self.depth -= 1
            return expression
        raise self.error(f"expected a value, found {token.describe()}", token)

    def name(self, token: _Token) -> Expr:
        constants = {"true": True, "always": True, "false": False, "null": None}
        if token.text in constants:
            return Const(constants[token.text])
        if token.text in KEYWORDS:
            raise self.error(f"expected a value, found {token.describe()}", token)
        if token.text in HELPERS and self.accept("("):
            return self.helper(token)
        path = self.fields()
        if token.text == "step":
            if path != ("elapsed",):
                raise self.error("'step' is only used as 'step.elapsed'", token)
            return ElapsedRef()
        if token.text in ("params", "parameters"):
            if not path:
                raise self.error(
                    f"expected '.' and a parameter ID after {token.text!r}", self.peek()
                )
            return ParameterRef(Reference("parameter", path[0], path[1:]))
        if path:
            return ResultRef(Reference("result", token.text, path))
        return NameRef(Reference("bare", token.text))

    def helper(self, token: _Token) -> Expr:
        """``all(`` / ``any(`` / ``count(`` taken: the action (and a path in its result)."""
        action = self.take()
        if action.kind != "name" or action.text in (*KEYWORDS, "step", "params", "parameters"):
            raise self.error(
                f"expected the name of a fan-out action in {token.text}(), found "
                f"{action.describe()}",
                action,
            )
        path = self.fields()
        self.expect(")", "')'")
        return Members(token.text, Reference("result", action.text, path))

    def fields(self) -> tuple[str, ...]:
        path: list[str] = []
        while True:
            if self.accept("."):
                token = self.take()
                if token.kind != "name":
                    raise self.error(
                        f"expected a field name after '.', found {token.describe()}", token
                    )
                path.append(token.text)
            elif self.accept("["):
                token = self.take()
                if token.kind != "string":
                    raise self.error(
                        f"expected a quoted field name, found {token.describe()}", token
                    )
                path.append(token.value)
                self.expect("]", "']'")
            else:
                return tuple(path)


def _parse(text: str) -> Expr:
    if not isinstance(text, str):
        raise _error(str(text), f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise _error(text, f"longer than {MAX_LENGTH} characters ({len(text)})")
    return _Parser(text).parse()


# -- conditions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """A parsed condition: constructing one parses ``text`` (``ConditionError`` if it can't)."""

    text: str
    expression: Expr = field(init=False, repr=False, compare=False)
    _references: frozenset[Reference] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        expression = _parse(self.text)
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "_references", frozenset(expression.references()))

    @property
    def is_always(self) -> bool:
        """True for ``always`` / ``true``: renderers omit it, engines need not evaluate it."""
        return isinstance(self.expression, Const) and self.expression.value is True

    def references(self) -> frozenset[Reference]:
        """Every name the condition uses, for static checks."""
        return self._references

    def evaluate(self, scope: ConditionScope) -> bool:
        """Whether the condition is enabled; ``ConditionError`` when the recipe is wrong."""
        return evaluate_expression(self.expression, scope, text=self.text)


def parse_condition(text: str) -> Condition:
    """``text`` parsed; ``ConditionError`` names the position and the problem."""
    return Condition(text)


def skip_reason(condition: Condition | None, scope: ConditionScope) -> str | None:
    """Why an action whose ``condition`` is false when it is due is skipped (nothing sent,
    done with this as its error); ``None``: it runs. ``ConditionError``: it cannot be decided."""
    if condition is None or condition.evaluate(scope):
        return None
    return f"skipped: its condition {condition.text!r} is false"


def assertion_error(
    assertion: Condition | None, action: str, scope: ConditionScope, data: Any
) -> str | None:
    """The error of a reply (``data``) of ``action`` that its ``assertion`` refuses (``None``: it
    holds): the reply's fields are named bare, the action's earlier result is not read."""
    if assertion is None:
        return None
    own = replace(
        scope,
        results={name: result for name, result in scope.results.items() if name != action},
        source_results=data if isinstance(data, Mapping) else {},
        source_action=action,
    )
    try:
        holds = assertion.evaluate(own)
    except ConditionError as error:
        return f"assertion {assertion.text!r}: {error.reason}"
    return None if holds else f"assertion failed: {assertion.text}"


ALWAYS = Condition("always")


def evaluate_expression(expression: Expr, scope: ConditionScope, *, text: str = "") -> bool:
    """Evaluate a parsed expression; ``text`` names it in errors."""
    try:
        value = expression.compute(_Context(scope, (), {}))
    except _Unavailable:
        return False
    except _Missing as missing:
        raise ConditionError(_element(text), str(missing), action=missing.action) from None
    except _Problem as problem:
        raise _error(text, str(problem)) from None
    except RecursionError:
        raise _error(text, "named conditions nested too deeply") from None
    if not isinstance(value, bool):
        raise _error(text, f"must evaluate to true or false, got {_kind(value)}")
    return value


def subexpressions(expression: Expr) -> tuple[Expr, ...]:
    """The direct operands of a node (none for literals and references)."""
    if isinstance(expression, Not | Negate):
        return (expression.operand,)
    if isinstance(expression, Logical | Compare | Arithmetic):
        return expression.operands
    return ()


# -- printing ----------------------------------------------------------------------------------


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


def unparse(expression: Expr) -> str:
    """Condition text for an expression tree; every compound part is parenthesized."""
    if isinstance(expression, Const):
        return _literal(expression.value)
    if isinstance(expression, ElapsedRef | ResultRef | ParameterRef | NameRef):
        return str(expression.reference)
    if isinstance(expression, Members):
        return f"{expression.helper}({expression.reference})"
    if isinstance(expression, Not):
        return f"(not {unparse(expression.operand)})"
    if isinstance(expression, Negate):
        return f"(-{unparse(expression.operand)})"
    if isinstance(expression, Logical):
        return "(" + f" {expression.operator} ".join(map(unparse, expression.operands)) + ")"
    if isinstance(expression, Compare | Arithmetic):
        return _chain(expression.operands, expression.operators)
    raise TypeError(f"not a condition expression: {expression!r}")


def _chain(operands: tuple[Expr, ...], operators: tuple[str, ...]) -> str:
    """``(a + b - c)``; operators of different precedence are nested so they keep their order."""
    text = unparse(operands[0])
    levels = {_level(operator) for operator in operators}
    for operator, operand in zip(operators, operands[1:], strict=True):
        text = f"{text} {operator} {unparse(operand)}"
        if len(levels) > 1:
            text = f"({text})"
    return text if len(levels) > 1 else f"({text})"


def _level(operator: str) -> int:
    return 0 if operator in _COMPARISONS else 1 if operator in _ADDITIVE else 2


def _literal(value: bool | int | float | str | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("NaN has no condition literal")
    if isinstance(value, float) and math.isinf(value):
        return "1e999" if value > 0 else "(-1e999)"
    return repr(value) if value >= 0 else f"(-{-value!r})"
