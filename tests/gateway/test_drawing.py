"""The column drawings formats share: the web UI's convention, and labels that stay labels."""

from __future__ import annotations

from xml.etree import ElementTree

from gateway.drawing import column_mermaid, column_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_each_name_is_a_step_and_an_action_and_the_active_one_is_lit() -> None:
    svg = ElementTree.fromstring(column_svg(["clamp", "<weld & check>"], {"clamp"}))
    groups = [
        (g.get("data-step"), g.get("data-action"), g.get("class")) for g in svg.iter(SVG + "g")
    ]
    assert groups == [
        ("clamp", "clamp", "step action active"),
        ("<weld & check>", "<weld & check>", "step action"),
    ]
    assert len(list(svg.iter(SVG + "line"))) == 1  # one link between the two


def test_the_mermaid_column_links_in_order_and_loops_back_when_asked() -> None:
    assert column_mermaid(["a", 'say "hi" | #1']) == (
        'flowchart TD\n    n0["a"]\n    n1["say #quot;hi#quot; #124; #35;1"]\n    n0 --> n1\n'
    )
    assert column_mermaid(["a"], "2 cycles").endswith('n0 -->|"2 cycles"| n0\n')
