"""An SVG drawing of a chart in IEC 61131-3 SFC notation, for the web UI and ``gateway recipe
render --format svg``.

- A step is a box (the initial step double-bordered) with its action block to the right: one
  row per action, the qualifier in its own cell, then the name and what it does.
- A transition is a bar across the link, its condition (and priority when nonzero) beside it.
  A transition to the node drawn right below is a straight link; any other (a loop back, a
  jump over nodes) ends in an arrow naming its target, the SFC *jump*. Several transitions
  out of one node hang from a single line, one column each, highest priority first.
- A selection branch opens and closes with a single line, each path under its guard's bar; a
  simultaneous branch opens and closes with a double line. Branches nest.

Elements carry classes and data attributes for tools, tests and live pages: ``g.step``
(``data-step``, class ``initial``, and ``active`` for the steps named in ``active``),
``g.branch`` (``data-branch``), ``g.transition`` (``data-source``, ``data-target``) and
``g.action`` (``data-action``). The drawing has its own style sheet, so it renders alone.
Layout is computed here (no layout engine, no fonts measured): text widths are estimated.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from html import escape as _escape

from gateway_sfc.chart import Chart, Edge
from gateway_sfc.model import Action, BranchType, Qualifier
from gateway_sfc.pipeline import what_it_sends

STEP_W, STEP_H = 150, 36
ACTION_GAP, ACTION_W, ACTION_ROW, QUALIFIER_W = 18, 280, 30, 30
LINK = 16  # vertical line above and below a transition bar
BAR_W = 24
JOIN_GAP = 16  # space above and below a branch's opening and closing lines
PATH_GAP = 40  # horizontal space between the paths of a branch
JUMP_H = 30  # arrow and target label of a jump
MARGIN = 20
CHAR_W = 6.6  # estimated width of a character at 11 px (labels)

STYLE = """
svg.sfc { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 11px; }
.sfc .link, .sfc .join { stroke: #333; stroke-width: 1.5; fill: none; }
.sfc .bar { stroke: #111; stroke-width: 4; }
.sfc .step rect { fill: #fff; stroke: #333; stroke-width: 1.5; }
.sfc .step text.name { font-size: 13px; font-weight: 600; text-anchor: middle; }
.sfc .step.active rect.box, .sfc .step.active rect.inner { fill: #ffd54a; stroke: #b26a00;
  stroke-width: 3; }
.sfc .branch.active .join { stroke: #b26a00; stroke-width: 3; }
.sfc .action rect { fill: #f6f8fa; stroke: #666; stroke-width: 1; }
.sfc .action text.kind { fill: #555; font-size: 10px; }
.sfc .action text.qualifier { font-weight: 700; text-anchor: middle; }
.sfc .condition { fill: #1a4f8b; }
.sfc .jump { fill: #8b1a1a; font-weight: 600; }
.sfc .arrow { fill: #333; }
"""


def render_svg(chart: Chart, active: Collection[str] = ()) -> str:
    """The chart as a standalone SVG document (text); ``active`` steps and branches lit."""
    top = _Sequence(chart, _top_level_order(chart), active)
    width = top.left + top.right + 2 * MARGIN
    height = top.height + 2 * MARGIN
    body = "\n".join(top.draw(MARGIN + top.left, MARGIN))
    title = _text(chart.recipe.name or "SFC recipe")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sfc" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img">\n'
        f"<title>{title}</title>\n<style>{STYLE}</style>\n"
        '<defs><marker id="sfc-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto"><path class="arrow" d="M0,0 L10,5 L0,10 z"/>'
        "</marker></defs>\n"
        f"{body}\n</svg>\n"
    )


def _text(value: str) -> str:
    return _escape(value, quote=True)


def _width(text: str) -> float:
    return len(text) * CHAR_W


def _top_level_order(chart: Chart) -> list[str]:
    """Top-level nodes depth first from the initial step, following transitions by priority,
    so a node's preferred successor is drawn right below it."""
    order: list[str] = []
    stack = [chart.initial]
    while stack:
        name = stack.pop()
        if name in order:
            continue
        order.append(name)
        targets = [edge.target for edge in chart.nodes[name].successors]
        stack.extend(reversed([target for target in targets if target not in order]))
    order.extend(
        name for name, node in chart.nodes.items() if node.container is None and name not in order
    )
    return order


def _edge_label(edge: Edge) -> str:
    label = "" if edge.condition.is_always else edge.condition.text
    if edge.priority:
        label = f"{label} [priority {edge.priority}]".strip()
    return label


@dataclass
class _Block:
    """Something drawn on a vertical axis: extents left and right of it, and its height."""

    left: float = 0.0
    right: float = 0.0
    height: float = 0.0

    def draw(self, x: float, y: float) -> Iterator[str]:
        raise NotImplementedError


class _Step(_Block):
    def __init__(self, chart: Chart, name: str, active: Collection[str]) -> None:
        self.name = name
        self.initial = name == chart.initial
        self.is_active = name in active
        self.actions = chart.recipe.actions_of(name)
        step = chart.recipe.step(name)
        self.retry = None if step is None else step.retry
        rows = len(self.actions)
        super().__init__(
            left=STEP_W / 2,
            right=STEP_W / 2 + (ACTION_GAP + ACTION_W if rows else 0),
            height=max(STEP_H, rows * ACTION_ROW),
        )

    def draw(self, x: float, y: float) -> Iterator[str]:
        classes = " ".join(
            [
                "step",
                *(["initial"] if self.initial else []),
                *(["active"] if self.is_active else []),
            ]
        )
        box_y = y + (self.height - STEP_H) / 2
        yield f'<g class="{classes}" data-step="{_text(self.name)}">'
        yield (
            f'<rect class="box" x="{x - STEP_W / 2:.1f}" y="{box_y:.1f}" width="{STEP_W}" '
            f'height="{STEP_H}"/>'
        )
        if self.initial:
            yield (
                f'<rect class="inner" x="{x - STEP_W / 2 + 4:.1f}" y="{box_y + 4:.1f}" '
                f'width="{STEP_W - 8}" height="{STEP_H - 8}"/>'
            )
        yield (
            f'<text class="name" x="{x:.1f}" y="{box_y + STEP_H / 2 + 4.5:.1f}">'
            f"{_text(self.name)}</text>"
        )
        if self.retry is not None and self.retry.max_attempts > 1:
            # Its step retry: the whole step runs up to this many times.
            retry = self.retry
            tip = (
                f"runs up to {retry.max_attempts} times, {retry.backoff_seconds:g} s apart at first"
            )
            yield (
                f'<text class="retry" x="{x + STEP_W / 2 - 4:.1f}" y="{box_y + 11:.1f}" '
                f'text-anchor="end"><title>{_text(tip)}</title>↻{retry.max_attempts}</text>'
            )
        if self.height > STEP_H:  # the link runs through the padding above and below the box
            yield _line(x, y, x, box_y)
            yield _line(x, box_y + STEP_H, x, y + self.height)
        if self.actions:
            left = x + STEP_W / 2 + ACTION_GAP
            yield _line(x + STEP_W / 2, box_y + STEP_H / 2, left, box_y + STEP_H / 2)
            for index, action in enumerate(self.actions):
                yield from _action(action, left, y + index * ACTION_ROW)
        yield "</g>"


def _action(action: Action, x: float, y: float) -> Iterator[str]:
    qualifier = str(action.qualifier)
    if action.time_seconds is not None:
        qualifier += f" {action.time_seconds:g}s"
    kind = f"{action.interaction} {what_it_sends(action)}"
    if action.qualifier is Qualifier.R:
        kind = "reset"
    elif action.timeout_seconds:
        kind += f", timeout {action.timeout_seconds:g} s"
    limit = int((ACTION_W - QUALIFIER_W - 8) / (CHAR_W * 0.9))
    if len(kind) > limit:
        kind = kind[: limit - 1] + "…"
    yield f'<g class="action" data-action="{_text(action.name)}">'
    yield f'<rect x="{x:.1f}" y="{y:.1f}" width="{QUALIFIER_W}" height="{ACTION_ROW}"/>'
    yield (
        f'<rect x="{x + QUALIFIER_W:.1f}" y="{y:.1f}" width="{ACTION_W - QUALIFIER_W}" '
        f'height="{ACTION_ROW}"/>'
    )
    yield (
        f'<text class="qualifier" x="{x + QUALIFIER_W / 2:.1f}" y="{y + 19:.1f}">'
        f"{_text(qualifier)}</text>"
    )
    yield f'<text x="{x + QUALIFIER_W + 5:.1f}" y="{y + 13:.1f}">{_text(action.name)}</text>'
    yield (
        f'<text class="kind" x="{x + QUALIFIER_W + 5:.1f}" y="{y + 25:.1f}">'
        f"<title>{_text(f'{action.interaction} {what_it_sends(action)}')}</title>"
        f"{_text(kind)}</text>"
    )
    yield "</g>"


def _line(x1: float, y1: float, x2: float, y2: float, cls: str = "link") -> str:
    return f'<line class="{cls}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"/>'


def _bar(source: str, edge: Edge, x: float, y: float) -> Iterator[str]:
    """A transition bar at height ``y`` on the axis ``x``, with its condition."""
    label = _edge_label(edge)
    yield (
        f'<g class="transition" data-source="{_text(source)}" data-target="{_text(edge.target)}">'
    )
    yield _line(x - BAR_W / 2, y, x + BAR_W / 2, y, "bar")
    if label:
        yield (
            f'<text class="condition" x="{x + BAR_W / 2 + 6:.1f}" y="{y + 4:.1f}">'
            f"{_text(label)}</text>"
        )
    yield "</g>"


@dataclass
class _Exits:
    """The transitions below a node: a straight one to the next node and/or jumps."""

    source: str
    straight: Edge | None
    jumps: list[Edge] = field(default_factory=list)

    @property
    def edges(self) -> list[Edge]:
        return [*([self.straight] if self.straight else []), *self.jumps]

    def columns(self) -> list[float]:
        """The axis offset of each edge's column (the straight edge's first, at 0)."""
        offsets, x = [], 0.0
        for edge in self.edges:
            offsets.append(x)
            x += max(BAR_W + 16 + _width(_edge_label(edge)), _width(edge.target) + 30, 60)
        return offsets

    @property
    def right(self) -> float:
        edges = self.edges
        if not edges:
            return 0.0
        last = edges[-1]
        return self.columns()[-1] + max(
            BAR_W / 2 + 8 + _width(_edge_label(last)), _width(last.target) / 2 + 20
        )

    @property
    def height(self) -> float:
        if not self.edges:
            return 0.0
        return (JOIN_GAP + 2 * LINK + JUMP_H) if self.jumps else 2 * LINK

    def draw(self, x: float, y: float) -> Iterator[str]:
        edges = self.edges
        if not edges:
            return
        columns = self.columns()
        top = y
        if self.jumps:  # several ways out hang from one line (a selection divergence)
            yield _line(x, y, x, y + JOIN_GAP)
            top = y + JOIN_GAP
            if len(edges) > 1:
                yield _line(x, top, x + columns[-1], top, "join")
        for edge, offset in zip(edges, columns, strict=True):
            cx = x + offset
            if edge is self.straight:
                yield _line(cx, top, cx, y + self.height)
                yield from _bar(self.source, edge, cx, top + LINK)
            else:
                yield (
                    f'<line class="link" x1="{cx:.1f}" y1="{top:.1f}" x2="{cx:.1f}" '
                    f'y2="{top + 2 * LINK + 8:.1f}" marker-end="url(#sfc-arrow)"/>'
                )
                yield from _bar(self.source, edge, cx, top + LINK)
                yield (
                    f'<text class="jump" x="{cx:.1f}" y="{top + 2 * LINK + 22:.1f}" '
                    f'text-anchor="middle">{_text(edge.target)}</text>'
                )


class _Sequence(_Block):
    """Nodes one below the other (the top level, or one path of a branch)."""

    def __init__(self, chart: Chart, order: list[str], active: Collection[str]) -> None:
        super().__init__()
        self.items: list[tuple[_Block, _Exits]] = []
        for index, name in enumerate(order):
            block = _node(chart, name, active)
            following = order[index + 1] if index + 1 < len(order) else None
            successors = chart.nodes[name].successors
            straight = next((edge for edge in successors if edge.target == following), None)
            exits = _Exits(name, straight, [edge for edge in successors if edge is not straight])
            self.items.append((block, exits))
            self.left = max(self.left, block.left)
            self.right = max(self.right, block.right, exits.right)
            self.height += block.height + exits.height
            if following is not None and straight is None:
                self.height += LINK  # a gap: the next node is reached by a jump

    def draw(self, x: float, y: float) -> Iterator[str]:
        for index, (block, exits) in enumerate(self.items):
            yield from block.draw(x, y)
            y += block.height
            yield from exits.draw(x, y)
            y += exits.height
            if index + 1 < len(self.items) and exits.straight is None:
                y += LINK


def _node(chart: Chart, name: str, active: Collection[str]) -> _Block:
    if name in chart.branches:
        return _Branch(chart, name, active)
    return _Step(chart, name, active)


class _Branch(_Block):
    """A selection or simultaneous branch: its paths side by side between two lines."""

    def __init__(self, chart: Chart, name: str, active: Collection[str]) -> None:
        self.name = name
        self.info = chart.branches[name]
        self.is_active = name in active
        self.paths = [_Sequence(chart, list(path), active) for path in self.info.paths]
        self.guards = list(self.info.guards)
        self.offsets: list[float] = []
        x = 0.0
        for index, path in enumerate(self.paths):
            if index:
                previous = self.paths[index - 1]
                guard_room = self._guard_width(index - 1)
                x += max(previous.right, guard_room) + PATH_GAP + path.left
            self.offsets.append(x)
        guard_height = 2 * LINK if self.selection else 0.0
        super().__init__(
            left=self.paths[0].left,
            right=self.offsets[-1] + max(self.paths[-1].right, self._guard_width(-1)),
            height=4 * JOIN_GAP
            + guard_height
            + max(path.height for path in self.paths)
            + (0 if self.selection else 6),  # a simultaneous branch's lines are double
        )

    @property
    def selection(self) -> bool:
        return self.info.type is BranchType.SELECTION

    def _guard_width(self, index: int) -> float:
        if not self.guards:
            return 0.0
        return BAR_W / 2 + 8 + _width(_edge_label(self.guards[index]))

    def draw(self, x: float, y: float) -> Iterator[str]:
        classes = "branch " + str(self.info.type) + (" active" if self.is_active else "")
        yield f'<g class="{classes}" data-branch="{_text(self.name)}">'
        last = x + self.offsets[-1]
        yield _line(x, y, x, y + JOIN_GAP)
        open_y = y + JOIN_GAP
        yield from self._join(x, last, open_y)
        top = open_y + (3 if not self.selection else 0)
        guard_height = 2 * LINK if self.selection else 0.0
        paths_top = top + JOIN_GAP + guard_height
        close_y = paths_top + max(path.height for path in self.paths) + JOIN_GAP
        for index, (path, offset) in enumerate(zip(self.paths, self.offsets, strict=True)):
            cx = x + offset
            yield _line(cx, top, cx, paths_top)
            if self.selection:
                yield from _bar(self.name, self.guards[index], cx, top + JOIN_GAP + LINK)
            yield from path.draw(cx, paths_top)
            yield _line(cx, paths_top + path.height, cx, close_y)
        yield from self._join(x, last, close_y)
        end = close_y + (3 if not self.selection else 0)
        yield _line(x, end, x, y + self.height)
        yield "</g>"

    def _join(self, x1: float, x2: float, y: float) -> Iterator[str]:
        yield _line(x1 - 10, y, x2 + 10, y, "join")
        if not self.selection:  # simultaneous: a double line
            yield _line(x1 - 10, y + 3, x2 + 10, y + 3, "join")
