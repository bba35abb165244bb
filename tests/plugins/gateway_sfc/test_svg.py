"""The SVG drawing: every step, branch and transition present, marked for tools, safely quoted."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gateway.cli import main
from gateway_sfc.chart import Chart, compile_chart
from gateway_sfc.model import load_recipe
from gateway_sfc.svg import render_svg

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "recipes"
SVG = "{http://www.w3.org/2000/svg}"


def chart(name: str) -> Chart:
    return compile_chart(load_recipe(json.loads((EXAMPLES / f"{name}.json").read_text())))


def groups(svg: ET.Element, kind: str) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if kind in (g.get("class") or "").split()]


def every_edge(chart: Chart) -> set[tuple[str, str]]:
    edges = {(name, edge.target) for name, node in chart.nodes.items() for edge in node.successors}
    edges |= {
        (name, guard.target) for name, info in chart.branches.items() for guard in info.guards
    }
    return edges


@pytest.mark.parametrize("name", ["rear_axle", "nested_branches", "loop_until_count"])
def test_every_element_is_drawn_once(name: str) -> None:
    compiled = chart(name)
    svg = ET.fromstring(render_svg(compiled))
    steps = [g.get("data-step") or "" for g in groups(svg, "step")]
    assert sorted(steps) == sorted(step.name for step in compiled.recipe.steps)
    branches = {g.get("data-branch"): g.get("class") for g in groups(svg, "branch")}
    assert branches.keys() == compiled.branches.keys()
    for branch, info in compiled.branches.items():
        assert str(info.type) in (branches[branch] or "").split()
    transitions = {(g.get("data-source"), g.get("data-target")) for g in groups(svg, "transition")}
    assert transitions == every_edge(compiled)
    actions = {g.get("data-action") for g in groups(svg, "action")}
    assert actions == {action.name for action in compiled.recipe.actions}
    initial = [g.get("data-step") for g in groups(svg, "initial")]
    assert initial == [compiled.initial]
    assert not groups(svg, "active")
    assert float(svg.get("width") or 0) > 0
    assert float(svg.get("height") or 0) > 0


def test_conditions_and_priorities_are_written_beside_their_bars() -> None:
    svg = ET.fromstring(render_svg(chart("rear_axle")))
    labels = {
        (g.get("data-source"), g.get("data-target")): "".join(g.itertext()).strip()
        for g in groups(svg, "transition")
    }
    assert labels[("VerifyTorque", "Complete")] == "torque_ok"
    assert labels[("VerifyTorque", "Rejected")] == "not torque_ok [priority 1]"
    assert labels[("Init", "FitAndQa")] == ""  # always: no label


def test_active_steps_and_branches_carry_the_class() -> None:
    svg = ET.fromstring(render_svg(chart("rear_axle"), active={"FitAndQa", "TightenBolts"}))
    assert [g.get("data-step") for g in groups(svg, "active") if g.get("data-step")] == [
        "TightenBolts"
    ]
    assert [g.get("data-branch") for g in groups(svg, "active") if g.get("data-branch")] == [
        "FitAndQa"
    ]


def test_names_are_quoted() -> None:
    recipe = {
        "name": "<script>alert(1)</script>",
        "steps": [{"name": 'A "quoted" <step> & more', "initial": True}, {"name": "B"}],
        "transitions": [{"source": 'A "quoted" <step> & more', "target": "B"}],
    }
    text = render_svg(compile_chart(load_recipe(recipe)))
    svg = ET.fromstring(text)  # well-formed whatever the names
    assert "<script>" not in text
    assert [g.get("data-step") for g in groups(svg, "step")] == ['A "quoted" <step> & more', "B"]


def test_the_cli_renders_svg(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "rear_axle.json")
    assert main(["recipe", "render", "--format", "svg", path]) == 0
    out = capsys.readouterr().out
    assert out == render_svg(chart("rear_axle"))
    assert main(["recipe", "render", "--format", "mermaid", path]) == 0
    assert capsys.readouterr().out.startswith("flowchart TD\n")
