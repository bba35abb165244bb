"""Condition text to expression tree and back: a tokenizer, a recursive-descent parser (one
method per rule of the grammar in ``gateway.conditions``) and ``unparse``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gateway.expressions import (
    ADDITIVE,
    COMPARISONS,
    HELPERS,
    KEYWORDS,
    MAX_DEPTH,
    MAX_LENGTH,
    MULTIPLICATIVE,
    NAME,
    Arithmetic,
    Compare,
    ConditionError,
    Const,
    ElapsedRef,
    Expr,
    Logical,
    Members,
    NameRef,
    Negate,
    Not,
    ParameterRef,
    Reference,
    ResultRef,
    condition_error,
    quote,
)

_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_OPERATORS = ("==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "+", "-", "*", "/", "%")
_PUNCTUATION = ("(", ")", ".", "[", "]")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "0": "\0"}


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
        return condition_error(self.text, f"{problem} at position {position + 1}")

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
        if match := NAME.match(text, start):
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
        return condition_error(self.text, f"{problem} at position {token.position + 1}")

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
        return self.chain(self.sum, COMPARISONS, Compare)

    def sum(self) -> Expr:
        return self.chain(self.product, ADDITIVE, Arithmetic)

    def product(self) -> Expr:
        return self.chain(self.unary, MULTIPLICATIVE, Arithmetic)

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


def parse_expression(text: str) -> Expr:
    if not isinstance(text, str):
        raise condition_error(str(text), f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise condition_error(text, f"longer than {MAX_LENGTH} characters ({len(text)})")
    return _Parser(text).parse()


# -- printing ----------------------------------------------------------------------------------


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
    return 0 if operator in COMPARISONS else 1 if operator in ADDITIVE else 2


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
