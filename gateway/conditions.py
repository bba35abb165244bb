"""Conditions: a small, safe expression language (no ``eval``), for every recipe format.

This module is what formats use (``Condition``, ``skip_reason``, ``assertion_error``); the
parser is ``gateway.conditionparser``, the tree and its evaluation ``gateway.expressions``.

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

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.conditionparser import parse_expression
from gateway.expressions import (
    ConditionError,
    ConditionScope,
    Const,
    Expr,
    NameRef,
    Reference,
    evaluate_expression,
    is_name,
    subexpressions,
)

# What recipe formats use, here beside ``Condition``: the tree itself is ``gateway.expressions``,
# its text ``gateway.conditionparser``.
__all__ = [
    "ALWAYS",
    "Condition",
    "ConditionError",
    "ConditionScope",
    "Expr",
    "NameRef",
    "Reference",
    "assertion_error",
    "is_name",
    "parse_condition",
    "skip_reason",
    "subexpressions",
]


# -- conditions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """A parsed condition: constructing one parses ``text`` (``ConditionError`` if it can't)."""

    text: str
    expression: Expr = field(init=False, repr=False, compare=False)
    _references: frozenset[Reference] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        expression = parse_expression(self.text)
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
