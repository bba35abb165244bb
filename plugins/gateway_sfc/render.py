"""A Mermaid drawing of a chart, so a recipe can be reviewed as a picture before it runs.

``render_mermaid`` writes a ``flowchart TD``:

- a step is a box listing its actions (``name [qualifier] interaction type_id``); the initial
  step has a double border (Mermaid's subroutine shape ``[[...]]``);
- a selection branch is a diamond where it diverges and another where its paths converge;
- a simultaneous branch is a fork bar and a join bar (nodes labelled ``═══``);
- an edge is labelled with its condition (``always`` left out) and its priority when nonzero.

Recipe names can hold any character, so node ids are generated (``n0``, ``n1``, ...) and every
label is quoted with Mermaid's entity codes for the characters that would end or restyle it.
"""

from __future__ import annotations

from gateway_sfc.chart import Chart, Edge
from gateway_sfc.model import Action, BranchType, Qualifier
from gateway_sfc.pipeline import what_it_sends

FORK = "═══"

_ENTITIES = {
    "#": "#35;",
    '"': "#quot;",
    "&": "#amp;",
    "<": "#lt;",
    ">": "#gt;",
    "|": "#124;",
    "`": "#96;",
    "\n": " ",
    "\r": " ",
}


def escape(text: str) -> str:
    """``text`` safe inside a quoted Mermaid label."""
    return "".join(_ENTITIES.get(char, char) for char in text)


def render_mermaid(chart: Chart) -> str:
    """The chart as Mermaid ``flowchart TD`` text (ends with a newline)."""
    return "\n".join(_Renderer(chart).lines()) + "\n"


class _Renderer:
    def __init__(self, chart: Chart) -> None:
        self.chart = chart
        self.ids = {name: f"n{index}" for index, name in enumerate(chart.nodes)}

    def entry(self, name: str) -> str:
        """Where an edge into ``name`` ends: the step, or the branch's divergence."""
        return self.ids[name] if name not in self.chart.branches else self.ids[name] + "_in"

    def exit(self, name: str) -> str:
        """Where an edge out of ``name`` starts: the step, or the branch's convergence."""
        return self.ids[name] if name not in self.chart.branches else self.ids[name] + "_out"

    def lines(self) -> list[str]:
        lines = ["flowchart TD"]
        for name in self.chart.nodes:
            lines.extend(self.shapes(name))
        for name, node in self.chart.nodes.items():
            lines.extend(self.edge(self.exit(name), edge) for edge in node.successors)
        for name in self.chart.branches:
            lines.extend(self.branch_edges(name))
        return lines

    def shapes(self, name: str) -> list[str]:
        info = self.chart.branches.get(name)
        if info is None:
            label = "<br/>".join([escape(name), *map(_action_line, self.actions(name))])
            if name == self.chart.initial:
                return [f'    {self.ids[name]}[["{label}"]]']
            return [f'    {self.ids[name]}["{label}"]']
        text = escape(name)
        if info.type is BranchType.SELECTION:
            return [f'    {self.entry(name)}{{"{text}"}}', f'    {self.exit(name)}{{"end {text}"}}']
        return [
            f'    {self.entry(name)}["{FORK} {text} {FORK}"]',
            f'    {self.exit(name)}["{FORK} end {text} {FORK}"]',
        ]

    def actions(self, step: str) -> list[Action]:
        return self.chart.recipe.actions_of(step)

    def edge(self, source: str, edge: Edge) -> str:
        label = _edge_label(edge)
        arrow = f'-->|"{label}"|' if label else "-->"
        return f"    {source} {arrow} {self.entry(edge.target)}"

    def branch_edges(self, name: str) -> list[str]:
        """Divergence to each path's first node, each path's last node to the convergence."""
        info = self.chart.branches[name]
        lines = []
        for index, path in enumerate(info.paths):
            if info.guards:
                lines.append(self.edge(self.entry(name), info.guards[index]))
            else:
                lines.append(f"    {self.entry(name)} --> {self.entry(path[0])}")
            lines.append(f"    {self.exit(path[-1])} --> {self.exit(name)}")
        return lines


def _action_line(action: Action) -> str:
    if action.qualifier is Qualifier.R:
        return escape(f"{action.name} [R]")
    timing = f" {action.time_seconds:g}s" if action.time_seconds is not None else ""
    return escape(
        f"{action.name} [{action.qualifier}{timing}] {action.interaction} {what_it_sends(action)}"
    )


def _edge_label(edge: Edge) -> str:
    parts = [] if edge.condition.is_always else [edge.condition.text]
    if edge.priority:
        parts.append(f"priority {edge.priority}")
    return escape(" · ".join(parts))
