"""The row drawings formats share: the web UI's convention, and labels that stay labels."""

from __future__ import annotations

from xml.etree import ElementTree

from gateway.drawing import Box, Row, column, rows_mermaid, rows_svg

SVG = "{http://www.w3.org/2000/svg}"
ROWS = [
    Row("clamp", [Box("clamp", "gripper")]),
    Row("work", [Box("<weld & check>"), Box("scan")], parallel=True),
]


def boxes(svg_text: str) -> list[tuple[str | None, str | None, str | None]]:
    svg = ElementTree.fromstring(svg_text)
    return [(g.get("data-step"), g.get("data-action"), g.get("class")) for g in svg.iter(SVG + "g")]


def test_each_box_is_an_action_of_its_rows_step_and_what_runs_is_lit() -> None:
    assert boxes(rows_svg(ROWS, {"clamp"})) == [
        ("clamp", "clamp", "step action active"),
        ("work", "<weld & check>", "step action"),
        ("work", "scan", "step action"),
    ]
    # An active step lights all its actions.
    assert [c for _, _, c in boxes(rows_svg(ROWS, {"work"}))].count("step action active") == 2


def test_a_column_is_a_row_per_action() -> None:
    assert boxes(rows_svg(column(["a", "b"]), {"b"})) == [
        ("a", "a", "step action"),
        ("b", "b", "step action active"),
    ]


def test_the_mermaid_rows_link_in_order_a_parallel_row_is_a_subgraph() -> None:
    assert rows_mermaid(ROWS, 'say "hi" | #1') == (
        "flowchart TD\n"
        '    b0["clamp<br/>gripper"]\n'
        '    subgraph b1["work (par)"]\n'
        "        direction LR\n"
        '        b1c0["#lt;weld #amp; check#gt;"]\n'
        '        b1c1["scan"]\n'
        "    end\n"
        "    b0 --> b1\n"
        '    b1 -->|"say #quot;hi#quot; #124; #35;1"| b0\n'
    )
