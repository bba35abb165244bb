"""What the web UI shows of a sequence: its drawing and a job's progress (``RecipeViewer``).

The drawing reads top to bottom, one row per block; a ``par`` block's commands stand side by
side between double bars (the SFC notation for simultaneous branches, which operators know).
"""

from __future__ import annotations

from collections.abc import Collection
from html import escape

from gateway.recipes import ActionProgress, RecipeProgress, StepProgress
from gateway_sequence.model import SequenceRecipe
from gateway_sequence.state import Phase, Run, Status

_PHASES = {
    Phase.SENT: "dispatched",
    Phase.DONE: "done",
    Phase.FAILED: "failed",
    Phase.CANCELLED: "cancelled",
}
_BOX_W, _BOX_H, _GAP, _ROW = 150, 36, 20, 76


def progress(recipe: SequenceRecipe, run: Run) -> RecipeProgress:
    """How far ``run`` got: the steps out now (and their par block), each step's latest try."""
    active: list[StepProgress] = []
    if run.entered and run.status not in (Status.FINISHING, Status.ENDED):
        block = recipe.blocks[run.position]
        out = [run.steps[c.name] for c in block.commands if run.steps[c.name].phase is Phase.SENT]
        if block.parallel and out:
            active.append(StepProgress(block.name, min(s.sent_at for s in out), branch=True))
        active += [StepProgress(step.name, step.sent_at) for step in out]
    block_of = {c.name: b.name for b in recipe.blocks for c in b.commands}
    actions = [
        ActionProgress(
            name=step.name,
            step=block_of.get(step.name, step.name),
            phase=_PHASES[step.phase],
            attempt=step.attempt,
            tries=step.tries,
            max_attempts=recipe.command(step.name).max_attempts,
            dispatched_at=step.sent_at,
            deadline=step.deadline if step.phase is Phase.SENT else None,
            error=step.error,
            result=run.results.get(step.name),
        )
        for step in run.steps.values()
    ]
    return RecipeProgress(
        status=run.status.value,
        active=active,
        actions=actions,
        results=dict(run.results),
        error=run.error,
        outcome=None if run.outcome is None else run.outcome.value,
    )


def render_svg(recipe: SequenceRecipe, active: Collection[str] = ()) -> str:
    """The sequence as a standalone SVG; steps named in ``active`` have class ``active``."""
    widest = max(len(block.commands) for block in recipe.blocks)
    width = widest * (_BOX_W + _GAP) + _GAP
    height = len(recipe.blocks) * _ROW + _GAP
    middle = width / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sequence" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">',
        "<style>rect{fill:#fff;stroke:#333}.active rect{fill:#ffe58a}"
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
            lit = ' class="active"' if command.name in active else ""
            parts.append(
                f'<g id="step-{escape(command.name)}"{lit}>'
                f'<rect x="{x}" y="{top}" width="{_BOX_W}" height="{_BOX_H}"/>'
                f'<text x="{x + _BOX_W / 2}" y="{top + 15}">{escape(command.name)}</text>'
                f'<text x="{x + _BOX_W / 2}" y="{top + 29}" font-size="9">'
                f"{escape(command.equipment or command.type_id)}</text></g>"
            )
    parts.append("</svg>")
    return "\n".join(parts)
