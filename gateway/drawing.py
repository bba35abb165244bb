"""Drawings of a recipe whose actions run one after the other, for formats to use as they are.

A format's ``render_svg`` must follow the convention the web UI lights live: each step a
``g.step`` with ``data-step``, each action in it a ``g.action`` with ``data-action``, class
``active`` on what runs now. ``column_svg`` draws a column of boxes that way (each box is its
own step and action); ``column_mermaid`` the same column as a Mermaid flowchart. A format with
more structure (branches, blocks side by side) draws its own, in the same convention.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from html import escape

_BOX_W, _BOX_H, _ROW = 160, 36, 56
# Characters that would end or restyle a quoted Mermaid label, as Mermaid's entity codes.
_MERMAID = {"#": "#35;", '"': "#quot;", "&": "#amp;", "<": "#lt;", ">": "#gt;", "|": "#124;"}
STYLE = (
    "<style>rect{fill:#fff;stroke:#333}.active rect{fill:#ffe58a}.failed rect{stroke:#c00}"
    "text{font:12px sans-serif;text-anchor:middle}line{stroke:#333}</style>"
)


def column_svg(names: Sequence[str], active: Collection[str] = ()) -> str:
    """A standalone SVG of ``names`` top to bottom, linked; those in ``active`` lit."""
    parts = []
    for row, name in enumerate(names):
        top, lit, label = 20 + _ROW * row, " active" if name in active else "", escape(name)
        if row:
            parts.append(f'<line x1="100" y1="{top - _ROW + _BOX_H}" x2="100" y2="{top}"/>')
        parts.append(
            f'<g class="step action{lit}" data-step="{label}" data-action="{label}">'
            f'<rect x="20" y="{top}" width="{_BOX_W}" height="{_BOX_H}"/>'
            f'<text x="100" y="{top + 23}">{label}</text></g>'
        )
    height = 20 + _ROW * len(names)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="{height}" '
        f'viewBox="0 0 200 {height}">{STYLE}{"".join(parts)}</svg>'
    )


def column_mermaid(names: Sequence[str], back: str | None = None) -> str:
    """A Mermaid flowchart of ``names`` top to bottom; ``back``: a labelled link from the last
    to the first (a loop)."""
    lines = ["flowchart TD"]
    for row, name in enumerate(names):
        lines.append(f'    n{row}["{mermaid_label(name)}"]')
        if row:
            lines.append(f"    n{row - 1} --> n{row}")
    if back is not None and names:
        lines.append(f'    n{len(names) - 1} -->|"{mermaid_label(back)}"| n0')
    return "\n".join(lines) + "\n"


def mermaid_label(text: str) -> str:
    """``text`` safe inside a quoted Mermaid label."""
    return "".join(_MERMAID.get(char, char) for char in text)
