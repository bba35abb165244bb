"""Drawing sequences: the SVG the web UI shows and the Mermaid text ``gateway recipe render``
prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from gateway_sequence.format import SequenceFormat

EXAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "sequences" / "axle.json").read_text()
)
SVG = "{http://www.w3.org/2000/svg}"
FORMAT = SequenceFormat()


def drawn(active: set[str]) -> dict[str, tuple[str | None, str | None, bool]]:
    """Each step's box: its block (``data-step``), its action and whether it is lit."""
    svg = ElementTree.fromstring(FORMAT.render_svg(FORMAT.compile(EXAMPLE), active))
    return {
        str(g.get("id")): (g.get("data-step"), g.get("data-action"), "active" in g.get("class", ""))
        for g in svg.iter(f"{SVG}g")
    }


def test_the_drawing_has_a_box_per_step_and_lights_the_active_ones() -> None:
    assert drawn({"home"}) == {
        "step-position": ("position", "position", False),
        "step-tighten": ("fit_and_inspect", "tighten", False),
        "step-inspect": ("fit_and_inspect", "inspect", False),
        "step-home": ("home", "home", True),
    }


def test_an_active_par_block_lights_all_its_steps() -> None:
    """The runtime's active nodes are blocks: a par block by its name."""
    lit = {name for name, (_, _, on) in drawn({"fit_and_inspect"}).items() if on}
    assert lit == {"step-tighten", "step-inspect"}


def test_every_box_is_a_step_and_an_action_for_the_web_uis_live_view() -> None:
    svg = ElementTree.fromstring(FORMAT.render_svg(FORMAT.compile(EXAMPLE)))
    assert {g.get("class") for g in svg.iter(f"{SVG}g")} == {"step action"}


def test_the_mermaid_flowchart_has_a_box_per_step_and_a_subgraph_per_par_block() -> None:
    assert FORMAT.render_mermaid(FORMAT.compile(EXAMPLE)) == (
        "flowchart TD\n"
        '    b0["position<br/>positioner"]\n'
        '    subgraph b1["fit_and_inspect (par)"]\n'
        "        direction LR\n"
        '        b1c0["tighten<br/>tightener"]\n'
        '        b1c1["inspect<br/>camera"]\n'
        "    end\n"
        "    b0 --> b1\n"
        '    b2["home<br/>positioner"]\n'
        "    b1 --> b2\n"
    )


def test_mermaid_labels_cannot_end_their_quotes() -> None:
    recipe = {"steps": [{"name": "a", "type_id": 'x"]; click a <b>|#'}]}
    text = FORMAT.render_mermaid(FORMAT.compile(recipe))
    assert text == 'flowchart TD\n    b0["a<br/>x#quot;]; click a #lt;b#gt;#124;#35;"]\n'
