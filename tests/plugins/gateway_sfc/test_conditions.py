"""The condition language: parsing, errors with positions, evaluation semantics, limits."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.conditionparser import unparse
from gateway.conditions import Condition, parse_condition
from gateway.errors import ValidationError
from gateway.expressions import (
    MAX_DEPTH,
    MAX_LENGTH,
    Arithmetic,
    Compare,
    ConditionError,
    ConditionScope,
    Const,
    ElapsedRef,
    Expr,
    Logical,
    NameRef,
    Negate,
    Not,
    ParameterRef,
    Reference,
    ResultRef,
    evaluate_expression,
)

SCOPE = ConditionScope(
    results={
        "tighten": {"torque": 85.5, "count": 3, "ok": True, "tool": {"id": "T-1"}, "note": None},
        "camera": {"passed": False, "grade": "B", "zones": [1, 2]},
    },
    parameters={"bolts": 4, "variant": "heavy", "limits": {"max": 90}, "torque-spec": "85Nm"},
    source_results={"torque_ok": True, "count": 3},
    elapsed_seconds=12.5,
    named={
        "in_spec": parse_condition("80 <= tighten.torque <= params.limits.max"),
        "done": parse_condition("in_spec and tighten.count >= params.bolts"),
        "pending": parse_condition("missing.field == 1"),
    },
)


def evaluate(text: str, scope: ConditionScope = SCOPE) -> bool:
    return parse_condition(text).evaluate(scope)


def parse_error(text: str) -> ConditionError:
    with pytest.raises(ConditionError) as caught:
        parse_condition(text)
    return caught.value


# -- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("always", "true"),
        ("true", "true"),
        ("false", "false"),
        ("null == null", "(null == null)"),
        ("12", "12"),
        ("1.5e3", "1500.0"),
        ("2E-2", "0.02"),
        ("'it''s'", None),  # two strings side by side: an error, see below
        ("'a\\'b'", '"a\'b"'),
        ('"tab\\there\\u00e9"', '"tab\\there\u00e9"'),
        ("a-b", "(a - b)"),
        ("a - -b", "(a - (-b))"),
        ("1 + 2 * 3", "(1 + (2 * 3))"),
        ("(1 + 2) * 3", "((1 + 2) * 3)"),
        ("8 % 3 / 2", "(8 % 3 / 2)"),
        ("not a and b or c", "(((not a) and b) or c)"),
        ("! a && b || c", "(((not a) and b) or c)"),
        ("not a == b", "(not (a == b))"),
        ("0 < x.v <= 10 != false", "(0 < x.v <= 10 != false)"),
        ("tighten.tool.id", "tighten.tool.id"),
        ("tighten.and.not", "tighten.and.not"),
        ("params.bolts", "params.bolts"),
        ("parameters.bolts", "params.bolts"),
        ('params["torque-spec"]', 'params["torque-spec"]'),
        ('camera["grade"]', "camera.grade"),
        ("step.elapsed > 5", "(step.elapsed > 5)"),
        ("  torque_ok\n", "torque_ok"),
    ],
)
def test_parse_and_print(text: str, printed: str | None) -> None:
    if printed is None:
        parse_error(text)
        return
    condition = parse_condition(text)
    assert unparse(condition.expression) == printed
    assert unparse(parse_condition(printed).expression) == printed  # printing is stable


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty condition at position 1"),
        ("   ", "empty condition at position 4"),
        ("1 +", "expected a value, found the end of the condition at position 4"),
        ("(a", "expected ')', found the end of the condition at position 3"),
        ("a)", "unexpected ')' at position 2"),
        ("a = 1", "unexpected character '=' (use '==') at position 3"),
        ("a & b", "unexpected character '&' (use 'and') at position 3"),
        ("a | b", "unexpected character '|' (use 'or') at position 3"),
        ("a $ b", "unexpected character '$' at position 3"),
        ("'open", "unterminated string at position 1"),
        ("'\\q'", "unknown escape '\\\\q' at position 2"),
        ("'\\u12'", "'\\u' needs four hex digits at position 2"),
        ("3abc", "unexpected 'a' after the number at position 2"),
        ("a.", "expected a field name after '.', found the end of the condition at position 3"),
        ("a.1", "expected a field name after '.', found number '1' at position 3"),
        ("a[1]", "expected a quoted field name, found number '1' at position 3"),
        ('a["x"', "expected ']', found the end of the condition at position 6"),
        ("step", "'step' is only used as 'step.elapsed' at position 1"),
        ("step.started", "'step' is only used as 'step.elapsed' at position 1"),
        ("params", "expected '.' and a parameter ID after 'params' at position 7"),
        ("a and", "expected a value, found the end of the condition at position 6"),
        ("and a", "expected a value, found name 'and' at position 1"),
        ("a b", "unexpected name 'b' at position 3"),
        ("1 2", "unexpected number '2' at position 3"),
        (".5", "expected a value, found '.' at position 1"),
        ("+1", "expected a value, found '+' at position 1"),
    ],
)
def test_parse_errors_name_the_condition_the_problem_and_the_position(
    text: str, reason: str
) -> None:
    error = parse_error(text)
    assert isinstance(error, ValidationError)
    assert error.element == f"condition {text!r}"
    assert error.reason == reason


def test_limits_on_length_and_nesting() -> None:
    assert parse_condition("(" * MAX_DEPTH + "true" + ")" * MAX_DEPTH).evaluate(SCOPE)
    too_deep = parse_error("(" * (MAX_DEPTH + 1) + "true" + ")" * (MAX_DEPTH + 1))
    assert too_deep.reason == f"nested deeper than {MAX_DEPTH} levels at position {MAX_DEPTH + 1}"
    assert "nested deeper" in parse_error("not " * (MAX_DEPTH + 1) + "true").reason
    assert "nested deeper" in parse_error("-" * (MAX_DEPTH + 1) + "1").reason
    long = parse_error("true" + " " * MAX_LENGTH)
    assert long.reason == f"longer than {MAX_LENGTH} characters ({MAX_LENGTH + 4})"
    assert long.element.endswith("...'")  # a long text is shortened in the element


def test_long_flat_chains_evaluate_without_deep_recursion() -> None:
    count = (MAX_LENGTH - 10) // 4
    assert evaluate(" + ".join(["1"] * count) + f" == {count}")
    assert evaluate(" and ".join(["true"] * (MAX_LENGTH // 9)))


def test_references_list_every_name_used() -> None:
    condition = parse_condition(
        'torque_ok and tighten.tool.id == params["torque-spec"] or step.elapsed > 3 and done'
    )
    assert condition.references() == {
        Reference("bare", "torque_ok"),
        Reference("result", "tighten", ("tool", "id")),
        Reference("parameter", "torque-spec"),
        Reference("elapsed", "elapsed"),
        Reference("bare", "done"),
    }
    assert str(Reference("parameter", "torque-spec", ("a b",))) == 'params["torque-spec"]["a b"]'
    assert parse_condition("1 < 2").references() == frozenset()


def test_conditions_compare_by_text_and_know_always() -> None:
    assert Condition("a > 1") == parse_condition("a > 1")
    assert parse_condition("always").is_always
    assert parse_condition("(true)").is_always
    assert not parse_condition("a").is_always


# -- evaluation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("always", True),
        ("torque_ok", True),
        ("count == 3", True),
        ("tighten.torque > 85", True),
        ("tighten.count >= params.bolts", False),
        ("tighten.count + 1 >= params.bolts", True),
        ("80 <= tighten.torque <= 90", True),
        ("80 <= tighten.torque <= 85", False),
        ("1 < 2 < 3 < 4", True),
        ("3 > 2 > 2", False),
        ("tighten.count == 3.0", True),
        ("1 == true", False),
        ("0 == false", False),
        ("'1' == 1", False),
        ("'1' != 1", True),
        ("null == null", True),
        ("tighten.note == null", True),
        ("tighten.tool == tighten.tool", True),
        ("camera.zones == camera.zones", True),
        ("tighten.tool.id == 'T-1'", True),
        ("camera.grade < 'C'", True),
        ("'ab' + 'c' == 'abc'", True),
        ('params.variant == "heavy"', True),
        ('params["torque-spec"] == "85Nm"', True),
        ("params.limits.max == 90", True),
        ("7 % 3 == 1 and 7 / 2 == 3.5 and -2 * 3 == -6", True),
        ("step.elapsed > 12", True),
        ("step.elapsed >= 13", False),
        ("not camera.passed", True),
        ("in_spec", True),
        ("done", False),
        ("not done", True),
        ("camera.passed or tighten.ok", True),
        ("camera.passed and tighten.ok", False),
    ],
)
def test_evaluation(text: str, expected: bool) -> None:
    assert evaluate(text) is expected


@pytest.mark.parametrize(
    "text",
    [
        "missing.field",  # the action has no result yet
        "not missing.field",  # still unknown, so not enabled
        "pending",  # a named condition whose value is missing
        "not pending",
        "missing.a == 1 or false",
        "true and missing.a",
    ],
)
def test_a_value_that_is_not_there_yet_disables_the_condition(text: str) -> None:
    assert evaluate(text) is False


def test_a_bare_field_is_waited_for_while_a_source_action_still_runs() -> None:
    waiting = ConditionScope(source_results={"count": 3}, source_pending=True)
    assert evaluate("absent_field", waiting) is False


@pytest.mark.parametrize(
    ("text", "action", "reason"),
    [
        (
            "tighten.absent > 1",
            "tighten",
            "the result of action 'tighten' has no field 'absent' "
            "(it has: count, note, ok, tool, torque)",
        ),
        (
            "tighten.tool.serial == 'x'",
            "tighten",
            "field 'tool' of the result of action 'tighten' has no field 'serial' (it has: id)",
        ),
        (
            "tighten.torque.value > 1",
            "tighten",
            "field 'torque' of the result of action 'tighten' is a number, "
            "not an object with the field 'value'",
        ),
        (
            "params.absent == 1",
            None,
            "the job has no parameter 'absent' (it has: bolts, limits, torque-spec, variant)",
        ),
        ("params.limits.min < 1", None, "parameter 'limits' has no field 'min' (it has: max)"),
        (
            "absent_field",
            "tighten",
            "no result of the source step's actions has the field 'absent_field' "
            "(it has: count, torque_ok)",
        ),
        (
            "missing.a or absent_field",  # decided by neither side: the error shows
            "tighten",
            "no result of the source step's actions has the field 'absent_field'",
        ),
        (
            "broken",
            "camera",
            "the result of action 'camera' has no field 'printd' (it has: grade, passed, "
            "zones) (in named condition 'broken')",
        ),
    ],
)
def test_a_value_that_will_never_come_is_an_error_naming_the_field(
    text: str, action: str | None, reason: str
) -> None:
    scope = ConditionScope(
        results=SCOPE.results,
        parameters=SCOPE.parameters,
        source_results=SCOPE.source_results,
        named={"broken": parse_condition("camera.printd")},
        source_action="tighten",
    )
    with pytest.raises(ConditionError) as caught:
        evaluate(text, scope)
    assert caught.value.element == f"condition {text!r}"
    assert reason in caught.value.reason
    assert caught.value.action == action


def test_and_or_use_three_valued_logic() -> None:
    assert evaluate("missing.a or tighten.ok")  # true as soon as one side is
    assert evaluate("tighten.ok or missing.a")
    assert evaluate("not (missing.a and camera.passed)")  # false whatever missing.a will be
    assert not evaluate("not (missing.a and tighten.ok)")
    assert not evaluate("missing.a or camera.passed")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("'abc' < 3", "cannot compare string with number using '<'"),
        ("true < false", "cannot compare boolean with boolean using '<'"),
        ("1 / 0", "division by zero in '/'"),
        ("1 % 0 == 1", "division by zero in '%'"),
        ("'a' - 'b' == 1", "'-' needs two numbers, got string and string"),
        ("1 + true == 2", "'+' needs two numbers, got number and boolean"),
        ("-'a' == 1", "unary '-' needs a number, got string"),
        ("not 1", "the operand of 'not' must be true or false, got number"),
        ("1 and true", "an operand of 'and' must be true or false, got number"),
        ("tighten.count", "must evaluate to true or false, got number"),
        ("tighten.note", "must evaluate to true or false, got null"),
        ("'yes'", "must evaluate to true or false, got string"),
    ],
)
def test_type_errors_raise_naming_the_condition(text: str, reason: str) -> None:
    with pytest.raises(ConditionError) as caught:
        evaluate(text)
    assert caught.value.element == f"condition {text!r}"
    assert caught.value.reason == reason


def test_errors_inside_named_conditions_name_them() -> None:
    scope = ConditionScope(
        named={"bad": parse_condition("1 + 'x' == 2"), "number": parse_condition("1 + 1")}
    )
    with pytest.raises(ConditionError, match="in named condition 'bad'"):
        parse_condition("bad").evaluate(scope)
    with pytest.raises(ConditionError, match="named condition 'number' must be true or false"):
        parse_condition("number").evaluate(scope)


def test_named_condition_cycles_raise_instead_of_recursing() -> None:
    scope = ConditionScope(
        named={"a": parse_condition("b and true"), "b": parse_condition("not a")},
        source_results={"a": True},
    )
    with pytest.raises(ConditionError, match=r"refers to itself \(a -> b -> a\)"):
        parse_condition("a").evaluate(scope)


def test_evaluation_is_fast() -> None:
    condition = parse_condition(
        "in_spec and tighten.count >= params.bolts - 1 or step.elapsed > 60"
    )
    start = time.perf_counter()
    for _ in range(10_000):
        condition.evaluate(SCOPE)
    assert time.perf_counter() - start < 2.0  # ~10 µs each; generous for slow CI machines


def fan_out(levels: int) -> dict[str, Condition]:
    """``c_0`` written out has 2**levels terms; each named condition uses the next twice."""
    named = {f"c_{i}": parse_condition(f"c_{i + 1} and c_{i + 1}") for i in range(levels)}
    named[f"c_{levels}"] = parse_condition("tighten.ok")
    return named


def test_named_conditions_are_evaluated_once_per_evaluation() -> None:
    scope = ConditionScope(results=SCOPE.results, named=fan_out(31))  # 2**31 terms written out
    start = time.perf_counter()
    assert evaluate("c_0", scope) is True
    assert time.perf_counter() - start < 0.1
    waiting = ConditionScope(named=fan_out(31))  # tighten has no result yet: memoised too
    start = time.perf_counter()
    assert evaluate("c_0", waiting) is False
    assert time.perf_counter() - start < 0.1


# -- properties --------------------------------------------------------------------------------

TOKENS = [
    "a", "b.c", "params.n", "step.elapsed", "step", "params", "true", "false", "null", "always",
    "and", "or", "not", "&&", "||", "!", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/",
    "%", "(", ")", "[", "]", ".", "'s'", '"d"', "'", '"', "\\", "1", "2.5", "1e", "0", "=", "&",
    "|", "é", "\x00", "9" * 30,
]  # fmt: skip


def parse_and_evaluate(text: str) -> None:
    """Parsing and evaluating ``text`` either works or raises ``ConditionError``."""
    try:
        condition = parse_condition(text)
    except ConditionError:
        return
    with contextlib.suppress(ConditionError):
        assert condition.evaluate(SCOPE) in (True, False)


@given(st.text(max_size=200))
def test_random_text_only_ever_raises_condition_error(text: str) -> None:
    parse_and_evaluate(text)


@given(st.lists(st.sampled_from(TOKENS), max_size=40), st.sampled_from([" ", ""]))
def test_random_token_soup_only_ever_raises_condition_error(
    tokens: list[str], separator: str
) -> None:
    parse_and_evaluate(separator.join(tokens))


LEAVES: list[Expr] = [
    ResultRef(Reference("result", "tighten", ("count",))),
    ResultRef(Reference("result", "tighten", ("tool", "id"))),
    ResultRef(Reference("result", "camera", ("grade",))),
    ResultRef(Reference("result", "missing", ("x",))),
    ParameterRef(Reference("parameter", "bolts")),
    ParameterRef(Reference("parameter", "torque-spec")),
    ParameterRef(Reference("parameter", "absent")),
    ElapsedRef(),
    NameRef(Reference("bare", "torque_ok")),
    NameRef(Reference("bare", "in_spec")),
    NameRef(Reference("bare", "absent_field")),
]

constants = st.builds(
    Const,
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
)


@st.composite
def chains(draw: st.DrawFn, children: st.SearchStrategy[Expr], kind: str) -> Expr:
    operands = tuple(draw(st.lists(children, min_size=2, max_size=3)))
    operators = ["==", "!=", "<", "<=", ">", ">="] if kind == "compare" else list("+-*/%")
    chosen = tuple(draw(st.sampled_from(operators)) for _ in operands[1:])
    return Compare(operands, chosen) if kind == "compare" else Arithmetic(operands, chosen)


def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    operands = st.lists(children, min_size=2, max_size=3).map(tuple)
    return st.one_of(
        st.builds(Not, children),
        st.builds(Negate, children),
        st.builds(Logical, st.sampled_from(["and", "or"]), operands),
        chains(children, "compare"),
        chains(children, "arithmetic"),
    )


expressions = st.recursive(constants | st.sampled_from(LEAVES), extend, max_leaves=12)


def outcome(expression: Expr | Condition) -> tuple[str, Any]:
    try:
        if isinstance(expression, Condition):
            return ("value", expression.evaluate(SCOPE))
        return ("value", evaluate_expression(expression, SCOPE))
    except ConditionError:
        return ("error", None)


@given(expressions)
def test_printed_expressions_reparse_to_the_same_meaning(expression: Expr) -> None:
    text = unparse(expression)
    reparsed = parse_condition(text)
    assert outcome(reparsed) == outcome(expression), text
    assert unparse(parse_condition(unparse(reparsed.expression)).expression) == unparse(
        reparsed.expression
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all(tighten)", False),
        ("any(tighten)", True),
        ("count(tighten) >= 2", True),
        ("count(tighten) == 3", False),
        ("count(per_slot.left) == 1", True),
        ("tighten.nr1.torque > 80 and not all(tighten)", True),
    ],
)
def test_helpers_count_the_members_of_a_fan_out_that_succeeded(text: str, expected: bool) -> None:
    scope = ConditionScope(
        results={
            "tighten": {
                "nr1": {"torque": 85},
                "nr2": {"torque": 86},
                "nr3": {"error": "torque not reached", "data": None},
            },
            "per_slot": {"left": {"s1": {"ok": True}}},
        }
    )
    assert parse_condition(text).evaluate(scope) is expected


def test_a_helper_needs_a_fan_out_result_and_is_a_plain_name_otherwise() -> None:
    with pytest.raises(ConditionError, match=r"count\(tighten.nr1.torque\) needs a fan-out"):
        parse_condition("count(tighten.nr1.torque) > 1").evaluate(
            ConditionScope(results={"tighten": {"nr1": {"torque": 85}}})
        )
    # Not followed by '(': an action (or field) of that name.
    assert parse_condition("count.total > 1").evaluate(
        ConditionScope(results={"count": {"total": 2}})
    )
    assert unparse(parse_condition("all(tighten)").expression) == "all(tighten)"
    assert parse_condition("all(tighten)").references() == {Reference("result", "tighten")}
    with pytest.raises(ConditionError, match="expected the name of a fan-out action"):
        parse_condition("all(3)")
