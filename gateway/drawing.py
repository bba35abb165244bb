"""Drawings of a recipe that runs row after row, for formats to use as they are.

A format's ``render_svg`` must follow the convention the web UI lights live: each step a
``g.step`` with ``data-step``, each action in it a ``g.action`` with ``data-action``, class
``active`` on what runs now. ``rows_svg`` draws ``Row`` after ``Row`` that way: a row is a step
(the node the runtime reports active) of one box per action, several side by side between
double bars when they run in parallel (the SFC notation for simultaneous branches operators
know). ``rows_mermaid`` draws the same as a Mermaid flowchart, a parallel row as a subgraph.
``column`` makes the rows of actions that simply run one after the other. A format with more
structure (branches, loops inside) draws its own, in the same convention.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from html import escape

_BOX_W, _BOX_H, _GAP, _ROW = 150, 36, 20, 76
# Characters that would end or restyle a quoted Mermaid label, as Mermaid's entity codes.
_MERMAID = {"#": "#35;", '"': "#quot;", "&": "#amp;", "<": "#lt;", ">": "#gt;", "|": "#124;"}
_STYLE = (
    "<style>rect{fill:#fff;stroke:#333}.active rect{fill:#ffe58a}.failed rect{stroke:#c00}"
    "text{font:12px sans-serif;text-anchor:middle}line{stroke:#333}</style>"
)


@dataclass(frozen=True)
class Box:
    action: str
    detail: str = ""  # a second, smaller line: its equipment, say


@dataclass(frozen=True)
class Row:
    step: str
    boxes: Sequence[Box]
    parallel: bool = False  # its actions run at once


def column(actions: Sequence[str]) -> list[Row]:
    """Each action its own step, one after the other."""
    return [Row(action, [Box(action)]) for action in actions]


def rows_svg(rows: Sequence[Row], active: Collection[str] = (), kind: str = "recipe") -> str:
    """A standalone SVG (``class`` ``kind``); a box is lit when its action or its step is in
    ``active``."""
    width = max((len(row.boxes) for row in rows), default=1) * (_BOX_W + _GAP) + _GAP
    height, middle = len(rows) * _ROW + _GAP, width / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(kind)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        _STYLE,
    ]
    for number, row in enumerate(rows):
        top = _GAP + number * _ROW
        if number:  # the link from the row above
            parts.append(
                f'<line x1="{middle}" y1="{top - _ROW + _BOX_H}" x2="{middle}" y2="{top}"/>'
            )
        left = middle - (len(row.boxes) * (_BOX_W + _GAP) - _GAP) / 2
        if row.parallel:
            for y in (top - 6, top - 3, top + _BOX_H + 3, top + _BOX_H + 6):
                parts.append(f'<line x1="{left}" y1="{y}" x2="{width - left}" y2="{y}"/>')
        for column_number, box in enumerate(row.boxes):
            parts.append(_box_svg(row, box, left + column_number * (_BOX_W + _GAP), top, active))
    parts.append("</svg>")
    return "\n".join(parts)


def _box_svg(row: Row, box: Box, x: float, top: float, active: Collection[str]) -> str:
    lit = " active" if {box.action, row.step} & set(active) else ""
    action, centre = escape(box.action), x + _BOX_W / 2
    text = f'<text x="{centre}" y="{top + (15 if box.detail else 23)}">{action}</text>'
    if box.detail:
        text += f'<text x="{centre}" y="{top + 29}" font-size="9">{escape(box.detail)}</text>'
    return (
        f'<g id="step-{action}" class="step action{lit}" data-step="{escape(row.step)}" '
        f'data-action="{action}"><rect x="{x}" y="{top}" width="{_BOX_W}" height="{_BOX_H}"/>'
        f"{text}</g>"
    )


def rows_mermaid(rows: Sequence[Row], back: str | None = None) -> str:
    """Mermaid ``flowchart TD`` text (ends with a newline); ``back``: a labelled link from the
    last row to the first (a loop)."""
    lines = ["flowchart TD"]
    for number, row in enumerate(rows):
        node = f"b{number}"
        if row.parallel:
            lines.append(f'    subgraph {node}["{mermaid_label(row.step)} (par)"]')
            lines.append("        direction LR")
            lines.extend(f"        {_box(f'{node}c{n}', box)}" for n, box in enumerate(row.boxes))
            lines.append("    end")
        else:
            lines.append(f"    {_box(node, row.boxes[0])}")
        if number:
            lines.append(f"    b{number - 1} --> {node}")
    if back is not None and rows:
        lines.append(f'    b{len(rows) - 1} -->|"{mermaid_label(back)}"| b0')
    return "\n".join(lines) + "\n"


def _box(node: str, box: Box) -> str:
    detail = f"<br/>{mermaid_label(box.detail)}" if box.detail else ""
    return f'{node}["{mermaid_label(box.action)}{detail}"]'


def mermaid_label(text: str) -> str:
    """``text`` safe inside a quoted Mermaid label (on one line)."""
    return "".join(_MERMAID.get(char, " " if char in "\r\n" else char) for char in text)
