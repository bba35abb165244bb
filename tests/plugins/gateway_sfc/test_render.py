"""Mermaid rendering: every node drawn, every edge present, labels safely quoted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gateway_sfc.chart import Chart, compile_chart
from gateway_sfc.model import load_recipe
from gateway_sfc.render import FORK, escape, render_mermaid

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "recipes"
NODE = re.compile(r'^    (\w+)(\[\[|\[|\{)"(.*)"(\]\]|\]|\})$')
EDGE = re.compile(r'^    (\w+) -->(?:\|"(.*)"\|)? (\w+)$')


def chart(name: str) -> Chart:
    return compile_chart(load_recipe(json.loads((EXAMPLES / f"{name}.json").read_text())))


class Drawing:
    """The parsed Mermaid text: node id -> (shape, label); edges as (from label, text, to label)."""

    def __init__(self, text: str) -> None:
        lines = text.splitlines()
        assert lines[0] == "flowchart TD"
        assert text.endswith("\n")
        self.nodes: dict[str, tuple[str, str]] = {}
        raw_edges: list[tuple[str, str, str]] = []
        for line in lines[1:]:
            if node := NODE.match(line):
                assert node[1] not in self.nodes
                self.nodes[node[1]] = (node[2], node[3])
            elif edge := EDGE.match(line):
                raw_edges.append((edge[1], edge[2] or "", edge[3]))
            else:
                raise AssertionError(f"unexpected line {line!r}")
        self.edges = {(self.name(a), text, self.name(b)) for a, text, b in raw_edges}

    def name(self, node_id: str) -> str:
        """The first line of a node's label: the step name, or the branch bar/diamond text."""
        return self.nodes[node_id][1].split("<br/>")[0]

    def label(self, name: str) -> tuple[str, str]:
        """(shape, full label) of the node whose label starts with ``name``."""
        return next(node for node in self.nodes.values() if node[1].split("<br/>")[0] == name)


def test_rear_axle_drawing() -> None:
    drawing = Drawing(render_mermaid(chart("rear_axle")))
    fork, join = f"{FORK} FitAndQa {FORK}", f"{FORK} end FitAndQa {FORK}"
    for step in ("Init", "Positioning", "TightenBolts", "QaCheck", "VerifyTorque", "Complete"):
        assert drawing.label(step)
    assert drawing.label("Init")[0] == "[["  # the initial step has a double border
    assert drawing.label("Complete")[0] == "["
    assert (drawing.label(fork)[0], drawing.label(join)[0]) == ("[", "[")
    assert drawing.label("TightenBolts")[1] == (
        "TightenBolts<br/>tighten [N] push_command com.example.station.tighten.v1"
    )
    assert drawing.edges == {
        ("Init", "", fork),
        (fork, "", "Positioning"),
        ("Positioning", "", "TightenBolts"),
        ("TightenBolts", "", join),
        (fork, "", "QaCheck"),
        ("QaCheck", "", join),
        (join, "", "VerifyTorque"),
        ("VerifyTorque", "torque_ok", "Complete"),
        ("VerifyTorque", "not torque_ok · priority 1", "Rejected"),
    }


def test_nested_drawing_has_diamonds_guards_and_escaped_labels() -> None:
    drawing = Drawing(render_mermaid(chart("nested_branches")))
    outer_in, outer_out = f"{FORK} FitAndInspect {FORK}", f"{FORK} end FitAndInspect {FORK}"
    assert drawing.label("TightenChoice")[0] == "{"
    assert drawing.label("end TightenChoice")[0] == "{"
    assert drawing.label("CameraQa")[1].split("<br/>")[1:] == [
        "illuminate [L 30s] push_command com.example.station.light.v1",
        "camera_qa [N] pull_event com.example.station.qa_result.v1",
    ]
    assert drawing.label("Unload")[1] == "Unload<br/>clamp [R]"
    assert drawing.edges == {
        ("Load", "", outer_in),
        ("Position", "", "TightenChoice"),
        ("TightenChoice", "params.variant == #quot;heavy#quot;", "TightenHeavy"),
        ("TightenChoice", "priority 10", "TightenStandard"),
        ("TightenHeavy", "", "end TightenChoice"),
        ("TightenStandard", "", "end TightenChoice"),
        ("end TightenChoice", "", "VerifyTorque"),
        ("VerifyTorque", "", outer_out),
        (outer_in, "", "Position"),
        (outer_in, "", "CameraQa"),
        ("CameraQa", "", outer_out),
        (outer_out, "part_ok", "Unload"),
        (outer_out, "not part_ok · priority 1", "Reject"),
    }


def test_labels_with_quotes_and_markup_are_escaped() -> None:
    data: dict[str, Any] = {
        "steps": [{"name": 'Say "hi" <b>', "initial": True}, {"name": "A|B #1 `x`"}],
        "transitions": [
            {"source": 'Say "hi" <b>', "target": "A|B #1 `x`", "condition": "'<' != \"|\""}
        ],
    }
    # Every line still parses: no label broke out of its quotes.
    drawing = Drawing(render_mermaid(compile_chart(load_recipe(data))))
    start, end = "Say #quot;hi#quot; #lt;b#gt;", "A#124;B #35;1 #96;x#96;"
    assert drawing.label(start)[0] == "[["
    assert drawing.label(end)[0] == "["
    assert drawing.edges == {(start, "'#lt;' != #quot;#124;#quot;", end)}
    assert escape('a"b\nc') == "a#quot;b c"
