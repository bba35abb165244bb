"""Compiling recipes into charts: structure of valid charts, and one test per structural rule."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.conditions import ALWAYS, parse_condition
from gateway_sfc.chart import (
    Chart,
    Edge,
    PathRef,
    RecipeError,
    compile_chart,
)
from gateway_sfc.model import BranchType, load_recipe

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "recipes"
FREE_FORM = {"parameters", "conditions"}


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return data


def chart_of(data: Any) -> Chart:
    return compile_chart(load_recipe(data))


def recipe(
    steps: Sequence[str] = ("Init*", "A", "End"),
    transitions: Sequence[tuple[Any, ...]] = (("Init", "A"), ("A", "End")),
    branches: Sequence[tuple[str, str, list[list[str]]]] = (),
    actions: Sequence[dict[str, Any]] = (),
    **extra: Any,
) -> dict[str, Any]:
    """Recipe data in short form: ``"Name*"`` is the initial step, a transition is
    ``(source, target[, condition[, priority]])``, a branch ``(name, type, paths)``."""
    return {
        "steps": [{"name": s.rstrip("*"), "initial": s.endswith("*")} for s in steps],
        "transitions": [
            dict(zip(("source", "target", "condition", "priority"), t, strict=False))
            for t in transitions
        ],
        "branches": [{"name": n, "type": t, "branches": p} for n, t, p in branches],
        "actions": list(actions),
        **extra,
    }


def action(name: str, step: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "step": step,
        "interaction": "push_command",
        "type_id": f"com.example.{name}.v1",
        **fields,
    }


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(RecipeError) as caught:
        chart_of(data)
    assert caught.value.element == "recipe"
    assert caught.value.reason == "; ".join(caught.value.problems)
    return caught.value.problems


def targets(chart: Chart, name: str) -> list[str]:
    return [edge.target for edge in chart.nodes[name].successors]


# -- valid charts ------------------------------------------------------------------------------


def test_rear_axle_chart() -> None:
    chart = chart_of(example("rear_axle"))
    assert chart.initial == "Init"
    assert targets(chart, "Init") == ["FitAndQa"]
    assert chart.nodes["Positioning"].container == PathRef("FitAndQa", 0)
    assert chart.nodes["Positioning"].successors == (Edge("TightenBolts", ALWAYS, 0, True),)
    assert chart.nodes["TightenBolts"].successors == ()
    assert [name for name in chart.nodes if chart.is_path_end(name)] == ["TightenBolts", "QaCheck"]
    info = chart.branches["FitAndQa"]
    assert (info.type, info.guards) == (BranchType.SIMULTANEOUS, ())
    assert info.paths == (("Positioning", "TightenBolts"), ("QaCheck",))
    assert chart.first_nodes("FitAndQa") == ("Positioning", "QaCheck")
    assert targets(chart, "FitAndQa") == ["VerifyTorque"]
    assert [e.condition.text for e in chart.nodes["VerifyTorque"].successors] == [
        "torque_ok",
        "not torque_ok",
    ]
    assert [n for n in chart.nodes if chart.is_final(n)] == ["Complete", "Rejected"]
    assert not chart.is_final("TightenBolts")  # the end of a path, not of the chart


def test_loop_chart_orders_transitions_by_priority_then_file_order() -> None:
    chart = chart_of(example("loop_until_count"))
    assert targets(chart, "Tighten") == ["Rework", "Done", "Tighten"]
    assert chart.conditions["all_bolts_tightened"] == parse_condition(
        "tighten.count >= params.bolts"
    )
    same_priority = recipe(
        transitions=[("Init", "A"), ("A", "End", "a.x", 1), ("A", "A", "a.y", 0), ("A", "B")],
        steps=("Init*", "A", "End", "B"),
        actions=[action("a", "A")],
    )
    assert targets(chart_of(same_priority), "A") == ["A", "B", "End"]


def test_nested_chart_has_guards_in_path_order() -> None:
    chart = chart_of(example("nested_branches"))
    outer, inner = chart.branches["FitAndInspect"], chart.branches["TightenChoice"]
    assert chart.nodes["TightenChoice"].container == PathRef("FitAndInspect", 0)
    assert outer.paths[0] == ("Position", "TightenChoice", "VerifyTorque")
    assert targets(chart, "Position") == ["TightenChoice"]
    assert targets(chart, "TightenChoice") == ["VerifyTorque"]  # implicit: next in path
    assert inner.guards == (
        Edge("TightenStandard", parse_condition("always"), 10, False),
        Edge("TightenHeavy", parse_condition('params.variant == "heavy"'), 0, False),
    )
    assert chart.nodes["TightenHeavy"].successors == ()
    assert set(chart.conditions) == {"torque_in_spec", "part_ok"}


def test_unguarded_selection_paths_get_always_with_priority_zero() -> None:
    data = recipe(
        steps=("Init*", "A", "B", "End"),
        transitions=[("Init", "S"), ("S", "B", "params.b", 5), ("S", "End")],
        branches=[("S", "selection", [["A"], ["B"]])],
    )
    assert chart_of(data).branches["S"].guards == (
        Edge("A", ALWAYS, 0, True),
        Edge("B", parse_condition("params.b"), 5, False),
    )


def test_loops_inside_a_path_and_branches_re_entered() -> None:
    data = recipe(
        steps=("Init*", "A", "B", "C", "D", "End"),
        transitions=[
            ("Init", "P"),
            ("A", "A", "a.again", 0),
            ("A", "B", "not a.again", 1),
            ("P", "P", "params.repeat", 0),
            ("P", "End", "always", 1),
        ],
        branches=[("P", "simultaneous", [["A", "B"], ["C", "D"]])],
        actions=[action("a", "A")],
    )
    chart = chart_of(data)
    assert targets(chart, "A") == ["A", "B"]
    assert targets(chart, "C") == ["D"]
    assert targets(chart, "P") == ["P", "End"]


def to_pascal(name: str) -> str:
    return "".join("ID" if part == "id" else part.capitalize() for part in name.split("_"))


def pascal(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            to_pascal(key): item if key in FREE_FORM else pascal(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [pascal(item) for item in value]
    return value


@pytest.mark.parametrize("name", ["rear_axle", "loop_until_count", "nested_branches"])
def test_pascal_case_recipes_compile_identically(name: str) -> None:
    snake = example(name)
    converted = pascal(snake)
    assert "Steps" in converted
    assert "steps" not in converted
    assert chart_of(converted) == chart_of(snake)


# -- one invalid recipe per rule ---------------------------------------------------------------

SELECTION = ("Init*", "A", "A2", "B", "End")
NESTED = ("Init*", "A", "B", "C", "End")


INVALID: list[tuple[str, dict[str, Any], str]] = [
    (
        "duplicate step",
        recipe(steps=("Init*", "A", "A", "End")),
        "step 'A': duplicate name (already used by a step)",
    ),
    (
        "step and branch share a name",
        recipe(
            steps=("Init*", "A", "B", "End"),
            branches=[("A", "simultaneous", [["B"], ["End"]])],
        ),
        "branch 'A': duplicate name (already used by a step)",
    ),
    (
        "empty name",
        recipe(steps=("Init*", "A", "End", "")),
        "step '': the name must not be empty",
    ),
    (
        "path names nothing",
        recipe(branches=[("B", "simultaneous", [["A"], ["X"]])]),
        "branch 'B': path 2 names 'X', which is neither a step nor a branch",
    ),
    (
        "node in two paths",
        recipe(
            steps=("Init*", "A", "B", "C", "End"),
            transitions=[("Init", "P"), ("P", "Q"), ("Q", "End")],
            branches=[
                ("P", "simultaneous", [["A"], ["B"]]),
                ("Q", "simultaneous", [["A"], ["C"]]),
            ],
        ),
        "step 'A': is in more than one path (path 1 of branch 'P' and path 1 of branch 'Q')",
    ),
    (
        "branch in its own path",
        recipe(branches=[("B", "simultaneous", [["A"], ["B"]])]),
        "branch 'B': path 2 contains the branch itself",
    ),
    (
        "branch inside itself through nesting",
        recipe(
            steps=NESTED,
            transitions=[("Init", "End")],
            branches=[
                ("P", "simultaneous", [["A"], ["Q"]]),
                ("Q", "selection", [["B"], ["P"]]),
            ],
        ),
        "branch 'P': contains itself through 'Q'",
    ),
    (
        "branch with one path",
        recipe(
            transitions=[("Init", "B"), ("B", "End")],
            branches=[("B", "simultaneous", [["A"]])],
        ),
        "branch 'B': needs at least two paths (has 1)",
    ),
    (
        "empty path",
        recipe(
            transitions=[("Init", "B"), ("B", "End")],
            branches=[("B", "simultaneous", [["A"], []])],
        ),
        "branch 'B': path 2 is empty",
    ),
    (
        "no initial step",
        recipe(steps=("Init", "A", "End")),
        'recipe: no initial step (mark exactly one step "initial": true)',
    ),
    (
        "two initial steps",
        recipe(steps=("Init*", "A*", "End")),
        "recipe: 2 initial steps ('Init', 'A'); exactly one allowed",
    ),
    (
        "initial step inside a path",
        recipe(
            steps=("Init*", "A", "End"),
            transitions=[("B", "End")],
            branches=[("B", "simultaneous", [["Init"], ["A"]])],
        ),
        "step 'Init': the initial step must be top-level, not in path 1 of branch 'B'",
    ),
    (
        "unknown target",
        recipe(transitions=[("Init", "Nowhere"), ("Init", "A"), ("A", "End")]),
        "transition Init -> Nowhere: target 'Nowhere' is neither a step nor a branch",
    ),
    (
        "unknown source",
        recipe(transitions=[("Init", "A"), ("A", "End"), ("Ghost", "A")]),
        "transition Ghost -> A: source 'Ghost' is neither a step nor a branch",
    ),
    (
        "leaving a path directly",
        recipe(
            steps=NESTED,
            transitions=[("Init", "P"), ("A", "End"), ("P", "End")],
            branches=[("P", "simultaneous", [["A", "B"], ["C"]])],
        ),
        "transition A -> End: 'A' is in path 1 of branch 'P' and may only lead to a node of "
        "that path; branch 'P' is left only through transitions from 'P'",
    ),
    (
        "jumping to another path of the same branch",
        recipe(
            steps=NESTED,
            transitions=[("Init", "P"), ("A", "C"), ("P", "End")],
            branches=[("P", "simultaneous", [["A", "B"], ["C"]])],
        ),
        "transition A -> C: 'A' is in path 1 of branch 'P' and may only lead to a node of "
        "that path; branch 'P' is left only through transitions from 'P'",
    ),
    (
        "entering a path from outside",
        recipe(
            steps=NESTED,
            transitions=[("Init", "P"), ("Init", "B", "params.x", 1), ("P", "End")],
            branches=[("P", "simultaneous", [["A", "B"], ["C"]])],
        ),
        "transition Init -> B: 'B' is inside path 1 of branch 'P'; enter it through branch 'P'",
    ),
    (
        "entering a nested branch's path from the outer path",
        recipe(
            steps=("Init*", "A", "B", "C", "D", "End"),
            transitions=[("Init", "P"), ("A", "C"), ("P", "End")],
            branches=[
                ("P", "simultaneous", [["A", "Q"], ["D"]]),
                ("Q", "selection", [["B"], ["C"]]),
            ],
        ),
        "transition A -> C: 'C' is inside path 2 of branch 'Q'; enter it through branch 'Q'",
    ),
    (
        "selection guard at a node that is not first",
        recipe(
            steps=SELECTION,
            transitions=[("Init", "S"), ("S", "A2", "params.x"), ("S", "End")],
            branches=[("S", "selection", [["A", "A2"], ["B"]])],
        ),
        "transition S -> A2: a guard of selection branch 'S' must target the first node of a "
        "path; 'A2' is not first in path 1",
    ),
    (
        "two guards for one path",
        recipe(
            steps=SELECTION,
            transitions=[
                ("Init", "S"),
                ("S", "A", "params.x"),
                ("S", "A", "params.y"),
                ("S", "End"),
            ],
            branches=[("S", "selection", [["A", "A2"], ["B"]])],
        ),
        "transition S -> A: path 1 of branch 'S' has two guards",
    ),
    (
        "guard on a simultaneous branch",
        recipe(
            steps=SELECTION,
            transitions=[("Init", "S"), ("S", "A", "params.x"), ("S", "End")],
            branches=[("S", "simultaneous", [["A", "A2"], ["B"]])],
        ),
        "transition S -> A: branch 'S' is simultaneous: its paths start together, so no "
        "transition from it may enter a path",
    ),
    (
        "transition from the last node of a path",
        recipe(
            steps=NESTED,
            transitions=[("Init", "P"), ("B", "A", "params.again"), ("P", "End")],
            branches=[("P", "simultaneous", [["A", "B"], ["C"]])],
        ),
        "transition B -> A: 'B' is the last node of path 1 of branch 'P': finishing it finishes "
        "the path, so it cannot have transitions (add a step after it)",
    ),
    (
        "unreachable step",
        recipe(steps=("Init*", "A", "End", "Orphan"), transitions=[("Init", "A"), ("A", "End")]),
        "step 'Orphan': is not reachable from the initial step 'Init'",
    ),
    (
        "unreachable after a loop that never leaves",
        recipe(
            steps=NESTED,
            transitions=[("Init", "P"), ("A", "A", "params.x"), ("P", "End")],
            branches=[("P", "simultaneous", [["A", "B"], ["C"]])],
        ),
        "step 'B': is not reachable from the initial step 'Init'",
    ),
    (
        "chart never ends",
        recipe(transitions=[("Init", "A"), ("A", "End"), ("End", "Init")]),
        "recipe: the chart never ends: every top-level step and branch has outgoing transitions",
    ),
    (
        "action on a missing step",
        recipe(actions=[action("a", "Nope")]),
        "action 'a' of step 'Nope': step 'Nope' does not exist",
    ),
    (
        "action on a branch",
        recipe(
            transitions=[("Init", "B"), ("B", "End")],
            branches=[("B", "simultaneous", [["A"], ["X"]])],
            steps=("Init*", "A", "X", "End"),
            actions=[action("a", "B")],
        ),
        "action 'a' of step 'B': 'B' is a branch; actions belong to steps",
    ),
    (
        "duplicate action in a step",
        recipe(actions=[action("a", "A"), action("a", "A", qualifier="P")]),
        "action 'a' of step 'A': duplicate action name (already used in the step)",
    ),
    (
        "colon in an action name",
        recipe(actions=[action("press:1", "A")]),
        "action 'press:1' of step 'A': the name must not contain ':' (the correlation id of "
        "its commands is <job>:<action>:<attempt>)",
    ),
    (
        "duplicate action across steps",
        recipe(
            steps=("Init*", "A", "B", "End"),
            transitions=[("Init", "A"), ("A", "B"), ("B", "End")],
            actions=[action("a", "A"), action("a", "B")],
        ),
        "action 'a' of step 'B': duplicate action name (already used in step 'A')",
    ),
    (
        "L without time",
        recipe(actions=[action("a", "A", qualifier="L")]),
        "action 'a' of step 'A': qualifier L needs time_seconds > 0",
    ),
    (
        "D with zero time",
        recipe(actions=[action("a", "A", qualifier="D", time_seconds=0)]),
        "action 'a' of step 'A': qualifier D needs time_seconds > 0",
    ),
    (
        "time for N",
        recipe(actions=[action("a", "A", time_seconds=3)]),
        "action 'a' of step 'A': time_seconds is only for qualifiers L and D",
    ),
    (
        "timeout zero",
        recipe(actions=[action("a", "A", timeout_seconds=0)]),
        "action 'a' of step 'A': timeout_seconds must be > 0",
    ),
    (
        "pull_event pulse",
        recipe(actions=[action("a", "A", qualifier="P1", interaction="pull_event")]),
        "action 'a' of step 'A': a pull_event action cannot have qualifier P1: pulses do not "
        "wait, so nothing would wait for the event",
    ),
    (
        "reset without set",
        recipe(actions=[action("a", "A", qualifier="N"), action("a", "End", qualifier="R")]),
        "action 'a' of step 'End': qualifier R resets 'a', but no action of that name has S",
    ),
    (
        "retry without attempts",
        recipe(actions=[action("a", "A", retry={"max_attempts": 0})]),
        "action 'a' of step 'A': retry max_attempts must be >= 1",
    ),
    (
        "negative backoff",
        recipe(actions=[action("a", "A", retry={"backoff_seconds": -1})]),
        "action 'a' of step 'A': retry backoff_seconds must be >= 0",
    ),
    (
        "recipe retry",
        recipe(retry={"backoff_multiplier": 0.5}),
        "recipe: retry backoff_multiplier must be >= 1",
    ),
    (
        "empty type_id",
        recipe(actions=[action("a", "A", type_id="")]),
        "action 'a' of step 'A': type_id must not be empty",
    ),
    (
        "empty equipment",
        recipe(actions=[action("a", "A", equipment="")]),
        "action 'a' of step 'A': equipment must not be empty (leave it out for the default)",
    ),
    (
        "condition does not parse",
        recipe(transitions=[("Init", "A"), ("A", "End", "a.x >")], actions=[action("a", "A")]),
        "transition A -> End: condition 'a.x >': expected a value, found the end of the "
        "condition at position 6",
    ),
    (
        "named condition does not parse",
        recipe(conditions={"ok": "(a.x"}, actions=[action("a", "A")]),
        "named condition 'ok': condition '(a.x': expected ')', found the end of the condition "
        "at position 5",
    ),
    (
        "named condition name is a keyword",
        recipe(conditions={"always": "true"}),
        "named condition 'always': the name must be letters, digits and _, not a keyword",
    ),
    (
        "result of an action that does not exist",
        recipe(transitions=[("Init", "A"), ("A", "End", "tighten.torque > 80")]),
        "transition A -> End: condition 'tighten.torque > 80': 'tighten.torque' refers to "
        "'tighten', which is not an action",
    ),
    (
        "named condition refers to a missing action",
        recipe(conditions={"ok": "cam.passed"}),
        "named condition 'ok': condition 'cam.passed': 'cam.passed' refers to 'cam', which is "
        "not an action",
    ),
    (
        "named conditions in a cycle",
        recipe(conditions={"a": "b or params.x", "b": "not c", "c": "a"}),
        "named condition 'a': refers to itself (a -> b -> c -> a)",
    ),
    (
        "bare name on a step without actions",
        recipe(transitions=[("Init", "A"), ("A", "End", "torque_ok")]),
        "transition A -> End: 'torque_ok' is neither a named condition nor a result field of "
        "step 'A' ('A' has no actions)",
    ),
    (
        "bare name through a named condition",
        recipe(
            transitions=[("Init", "A"), ("A", "End", "ok")],
            conditions={"ok": "torque_ok and step.elapsed > 1"},
        ),
        "transition A -> End: 'torque_ok' is neither a named condition nor a result field of "
        "step 'A' ('A' has no actions)",
    ),
    (
        "bare name on a branch",
        recipe(
            steps=SELECTION,
            transitions=[("Init", "S"), ("S", "End", "done")],
            branches=[("S", "selection", [["A", "A2"], ["B"]])],
        ),
        "transition S -> End: 'done' is neither a named condition nor a result field of branch "
        "'S' ('S' is a branch)",
    ),
]


@pytest.mark.parametrize(
    ("data", "problem"), [(d, p) for _, d, p in INVALID], ids=[i for i, _, _ in INVALID]
)
def test_invalid_recipes_name_the_element(data: dict[str, Any], problem: str) -> None:
    assert problem in problems_of(data)


def test_every_problem_is_reported_not_just_the_first() -> None:
    data = recipe(
        steps=("Init*", "A", "A", "End", "Orphan"),
        transitions=[("Init", "A"), ("A", "End", "x >"), ("A", "Nowhere")],
        actions=[action("a", "A", qualifier="L")],
    )
    assert problems_of(data) == [
        "step 'A': duplicate name (already used by a step)",
        "action 'a' of step 'A': qualifier L needs time_seconds > 0",
        "transition A -> End: condition 'x >': expected a value, found the end of the "
        "condition at position 4",
        "transition A -> Nowhere: target 'Nowhere' is neither a step nor a branch",
        "step 'Orphan': is not reachable from the initial step 'Init'",
    ]


def fan_out(levels: int, top: str = "c_0") -> dict[str, str]:
    """Named conditions where ``c_i`` uses ``c_{i+1}`` twice: ``c_0`` has 2**(levels+1)-1 terms."""
    named = {f"c_{i}": f"c_{i + 1} and c_{i + 1}" for i in range(levels)}
    named[f"c_{levels}"] = "tighten.ok"
    return {"top": top, **named}


def fan_out_recipe(levels: int) -> dict[str, Any]:
    return recipe(
        transitions=[("Init", "A"), ("A", "End", "top")],
        actions=[action("tighten", "A")],
        conditions=fan_out(levels),
    )


def test_a_condition_that_expands_beyond_the_bound_is_refused_where_it_crosses_it() -> None:
    # c_18 is the first with more than 10,000 terms (2**14 - 1); the ones above it are not
    # reported again, nor is the transition that uses them.
    assert problems_of(fan_out_recipe(31)) == [
        "named condition 'c_18': condition 'c_19 and c_19' expands to 16383 terms, more than "
        "the limit of 10000 when the named conditions it uses are written out ('c_19' 2 "
        "times); use each named condition fewer times"
    ]
    chart_of(fan_out_recipe(12))  # 8,191 terms: within the bound


def test_a_transition_can_cross_the_bound_with_named_conditions_that_do_not() -> None:
    conditions = fan_out(12, top="c_0 or c_0")
    data = recipe(
        transitions=[("Init", "A"), ("A", "End", "c_0 and c_0")],
        actions=[action("tighten", "A")],
        conditions=conditions,
    )
    assert [problem.split(":")[0] for problem in problems_of(data)] == [
        "named condition 'top'",
        "transition A -> End",
    ]


def test_named_conditions_nested_too_deeply_are_refused() -> None:
    chained = {f"c_{i}": f"c_{i + 1} or tighten.ok" for i in range(250)}
    chained["c_250"] = "tighten.ok"
    data = recipe(
        transitions=[("Init", "A"), ("A", "End", "c_0")],
        actions=[action("tighten", "A")],
        conditions=chained,
    )
    (problem,) = problems_of(data)
    assert problem.startswith("named condition 'c_50': condition 'c_51 or tighten.ok' expands")
    assert "201 levels of nesting, more than the limit of 200" in problem


def test_checking_named_conditions_is_linear_in_their_number() -> None:
    # Diamonds: a_i and b_i both use a_{i+1} and b_{i+1}, so there are 2**60 paths from a_0.
    levels = 60
    conditions = {}
    for i in range(levels):
        for name in ("a", "b"):
            conditions[f"{name}_{i}"] = f"a_{i + 1} or b_{i + 1}"
    conditions[f"a_{levels}"] = conditions[f"b_{levels}"] = "torque_ok"
    conditions[f"b_{levels}"] = "a_0"  # and a cycle at the very bottom
    start = time.perf_counter()
    problems = problems_of(
        recipe(transitions=[("Init", "A"), ("A", "End", "a_0")], conditions=conditions)
    )
    assert time.perf_counter() - start < 1.0
    assert problems[0] == (
        "named condition 'a_0': refers to itself (a_0 -> a_1 -> a_2 -> "
        + " -> ".join(f"a_{i}" for i in range(3, levels))
        + f" -> b_{levels} -> a_0)"
    )
    assert problems[1:] == [
        "transition A -> End: 'torque_ok' is neither a named condition nor a result field of "
        "step 'A' ('A' has no actions)"
    ]


def test_valid_bare_names() -> None:
    # A result field of the source step's actions, or a named condition anywhere.
    chart = chart_of(
        recipe(
            transitions=[("Init", "A", "ready"), ("A", "End", "torque_ok")],
            actions=[action("a", "A")],
            conditions={"ready": "params.go == true"},
        )
    )
    assert chart.initial == "Init"
    assert set(chart.conditions) == {"ready"}


# -- robustness --------------------------------------------------------------------------------

NAMES = ["Init", "A", "B", "C", "P", "Q"]


@st.composite
def random_recipes(draw: st.DrawFn) -> dict[str, Any]:
    names = st.sampled_from(NAMES)
    steps = draw(st.lists(names, max_size=5))
    paths = st.lists(st.lists(names, max_size=3), max_size=3)
    branches = draw(
        st.lists(
            st.tuples(names, st.sampled_from(["selection", "simultaneous"]), paths), max_size=2
        )
    )
    conditions = st.sampled_from(["always", "a.x > 1", "flag", "nope.x", "named", "(", "not named"])
    transitions = draw(
        st.lists(st.tuples(names, names, conditions, st.integers(-1, 2)), max_size=8)
    )
    actions = draw(
        st.lists(
            st.builds(
                action,
                st.sampled_from(["a", "b"]),
                names,
                qualifier=st.sampled_from(["N", "P", "S", "R", "L", "D"]),
            ),
            max_size=3,
        )
    )
    initial = draw(st.sampled_from([*steps, "Init"]))
    return recipe(
        steps=[f"{s}*" if s == initial else s for s in steps],
        transitions=transitions,
        branches=branches,
        actions=actions,
        conditions=draw(st.sampled_from([{}, {"named": "flag or a.x == 2"}, {"named": "named"}])),
    )


@settings(max_examples=300)
@given(random_recipes())
def test_random_recipes_compile_or_raise_recipe_error(data: dict[str, Any]) -> None:
    try:
        chart = chart_of(data)
    except RecipeError as error:
        problems = error.problems
    else:
        assert chart.nodes[chart.initial].container is None
        assert any(chart.is_final(name) for name in chart.nodes)
        return
    assert problems
    assert all(": " in problem for problem in problems)
