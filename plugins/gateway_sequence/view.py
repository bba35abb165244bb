"""Drawings of a sequence: the SVG the web UI shows and a Mermaid flowchart for reviews.

Both read top to bottom, one row per block; a ``par`` block's commands stand side by side (in
the SVG between double bars, the SFC notation for simultaneous branches operators know).
"""

from __future__ import annotations

from collections.abc import Collection
from html import escape

from gateway_sequence.model import Command, SequenceRecipe

_BOX_W, _BOX_H, _GAP, _ROW = 150, 36, 20, 76
# Characters that would end or restyle a quoted Mermaid label, as Mermaid's entity codes.
_MERMAID = {"#": "#35;", '"': "#quot;", "&": "#amp;", "<": "#lt;", ">": "#gt;", "|": "#124;"}


def render_svg(recipe: SequenceRecipe, active: Collection[str] = ()) -> str:
    """The sequence as a standalone SVG; the steps named in ``active``, and those of the blocks
    named there, have class ``active``. Each step is a ``g.step.action`` with ``data-step`` (its
    block) and ``data-action`` (itself), for the web UI's live view."""
    widest = max(len(block.commands) for block in recipe.blocks)
    width = widest * (_BOX_W + _GAP) + _GAP
    height = len(recipe.blocks) * _ROW + _GAP
    middle = width / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sequence" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        "<style>rect{fill:#fff;stroke:#333}.active rect{fill:#ffe58a}.failed rect{stroke:#c00}"
        "text{font:12px sans-serif;text-anchor:middle}line{stroke:#333}</style>",
    ]
    for row, block in enumerate(recipe.blocks):
        top = _GAP + row * _ROW
        if row:  # the link from the block above
            parts.append(
                f'<line x1="{middle}" y1="{top - _ROW + _BOX_H}" x2="{middle}" y2="{top}"/>'
            )
        count = len(block.commands)
        left = middle - (count * (_BOX_W + _GAP) - _GAP) / 2
        if block.parallel:
            for y in (top - 6, top - 3, top + _BOX_H + 3, top + _BOX_H + 6):
                parts.append(f'<line x1="{left}" y1="{y}" x2="{width - left}" y2="{y}"/>')
        for column, command in enumerate(block.commands):
            x = left + column * (_BOX_W + _GAP)
            lit = " active" if {command.name, block.name} & set(active) else ""
            parts.append(  # the web UI lights a block's steps, and marks a failed one
                f'<g id="step-{escape(command.name)}" class="step action{lit}" '
                f'data-step="{escape(block.name)}" data-action="{escape(command.name)}">'
                f'<rect x="{x}" y="{top}" width="{_BOX_W}" height="{_BOX_H}"/>'
                f'<text x="{x + _BOX_W / 2}" y="{top + 15}">{escape(command.name)}</text>'
                f'<text x="{x + _BOX_W / 2}" y="{top + 29}" font-size="9">'
                f"{escape(command.equipment or command.type_id)}</text></g>"
            )
    parts.append("</svg>")
    return "\n".join(parts)


def render_mermaid(recipe: SequenceRecipe) -> str:
    """The sequence as Mermaid ``flowchart TD`` text (ends with a newline): a box per step
    (its name and equipment, or type when routed by type), a ``par`` block as a subgraph."""
    lines = ["flowchart TD"]
    for row, block in enumerate(recipe.blocks):
        if block.parallel:
            lines.append(f'    subgraph b{row}["{_label(block.name)} (par)"]')
            lines.append("        direction LR")
            lines.extend(f"        {_box(f'b{row}c{n}', c)}" for n, c in enumerate(block.commands))
            lines.append("    end")
        else:
            lines.append(f"    {_box(f'b{row}', block.commands[0])}")
        if row:
            lines.append(f"    b{row - 1} --> b{row}")
    return "\n".join(lines) + "\n"


def _box(node: str, command: Command) -> str:
    return f'{node}["{_label(command.name)}<br/>{_label(command.equipment or command.type_id)}"]'


def _label(text: str) -> str:
    return "".join(_MERMAID.get(char, " " if char in "\r\n" else char) for char in text)
