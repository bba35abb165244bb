"""Compiling a recipe into an executable chart, checking its structure first.

A recipe lists steps, branches, transitions and actions by name; the engine needs to know, for
every node, where it sits and where it may go next. ``compile_chart`` works that out once and
refuses a recipe that could fail halfway, listing every problem (not just the first), each as
``"<element>: <reason>"`` so an operator can fix the recipe in one round.

The chart:

- *Nodes* are steps and branches; a name is unique across both.
- A branch's ``branches`` are *paths*: non-empty lists of node names, so branches nest. A node
  is in at most one path, a branch never contains itself (directly or through nesting), and a
  branch has at least two paths. Nodes in no path are *top-level*. Paths are numbered from 1 in
  messages; ``PathRef.index`` counts from 0.
- The *successors* of a node are its explicit transitions (source = node), lowest priority
  number first, then file order. A node inside a path with no explicit outgoing transition that
  is not the last of its path gets an implicit ``always`` edge to the next node of the path.
- The last node of a path has no successor: finishing it finishes the path. So it must not be
  the source of a transition (a loop at the end of a path needs a step after the loop).
- Exactly one initial step, top-level. A transition whose source is inside a path targets a
  node of the same path (loops allowed); a branch is left only through transitions whose source
  is the branch itself, and entered only through the branch node, never at a node inside it.
- Selection branch ``B``: a transition ``B -> <first node of a path>`` is that path's *guard*
  (condition and priority); a path without one is guarded by ``always`` with priority 0. The
  engine takes the enabled guard with the lowest priority number, ties in path order. A guard at
  a node that is not first in its path is an error; so is a second guard for the same path.
  Simultaneous branch: no guards (all paths start together).
- Other transitions from a branch are its *exits*, considered after convergence (simultaneous:
  every path finished; selection: the chosen path finished). They stay at the branch's level.
- Every node is reachable from the initial step (successors, a branch's entry to its paths'
  first nodes, a path's end to its branch's successors), and at least one node is *final*: a
  top-level node without outgoing transitions, whose end ends the recipe.

Actions: ``step`` names a step (not a branch); names are unique (R aside); L and D need
``time_seconds`` > 0 and the other qualifiers must not have it; ``timeout_seconds`` is > 0 when
given; a pull_event cannot be a pulse (P, P0, P1: nothing would wait for the event); an R
association names an action that has an S association somewhere in the recipe (its own
interaction and type_id are ignored); retry policies (the recipe's, the actions' and the steps')
have ``max_attempts`` >= 1, ``backoff_seconds`` and ``max_backoff_seconds`` >= 0 and
``backoff_multiplier`` >= 1; a step with a retry has actions.

Conditions: every transition condition and named condition parses; ``<action>.<field>`` names
an existing action; named conditions have names usable as bare words and do not refer to
themselves, directly or not; a bare name that is not a named condition is a result field of the
source step, so it is an error when the source is a branch or a step without actions (also when
the name comes in through a named condition); no condition, with the named conditions it uses
written out, has more than ``named.MAX_EXPANDED_TERMS`` terms or ``named.MAX_EXPANDED_DEPTH``
levels of nesting (only where the bound is crossed is it reported).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.conditions import (
    ALWAYS,
    Condition,
    ConditionError,
    is_name,
    parse_condition,
)
from gateway.formats import RecipeError as RecipeError
from gateway_sfc.model import (
    Action,
    Branch,
    BranchType,
    Interaction,
    Qualifier,
    Recipe,
    RetryPolicy,
    Transition,
)
from gateway_sfc.named import NamedConditions, named_uses


@dataclass(frozen=True)
class Edge:
    """A way out of a node (or into a selection path): taken when ``condition`` is enabled."""

    target: str
    condition: Condition
    priority: int
    implicit: bool  # made up by the compiler (next node of a path, unguarded path)


@dataclass(frozen=True)
class PathRef:
    """Path ``index`` (from 0) of ``branch``."""

    branch: str
    index: int


@dataclass(frozen=True)
class Node:
    name: str
    is_branch: bool
    container: PathRef | None  # None: top-level
    successors: tuple[Edge, ...]  # a branch's: its exits, taken after convergence


@dataclass(frozen=True)
class BranchInfo:
    name: str
    type: BranchType
    paths: tuple[tuple[str, ...], ...]
    guards: tuple[Edge, ...]  # selection: one per path, in path order; simultaneous: empty


@dataclass(frozen=True)
class Chart:
    """A recipe whose structure has been checked, ready to run."""

    recipe: Recipe
    initial: str
    nodes: Mapping[str, Node]
    branches: Mapping[str, BranchInfo]
    conditions: Mapping[str, Condition]  # the named conditions

    @functools.cached_property
    def dispatchable(self) -> Mapping[str, Action]:
        """The actions that send or wait (every one but R, which only resets), by name: built
        once per chart, not per step (an executor is built for every stimulus)."""
        return {a.name: a for a in self.recipe.actions if a.qualifier is not Qualifier.R}

    def is_final(self, name: str) -> bool:
        """Whether finishing ``name`` ends the recipe."""
        node = self.nodes[name]
        return node.container is None and not node.successors

    def first_nodes(self, branch: str) -> tuple[str, ...]:
        """The first node of each path of ``branch``, in path order."""
        return tuple(path[0] for path in self.branches[branch].paths)

    def path(self, ref: PathRef) -> tuple[str, ...]:
        return self.branches[ref.branch].paths[ref.index]

    def is_path_end(self, name: str) -> bool:
        """Whether ``name`` is the last node of its path (finishing it finishes the path)."""
        container = self.nodes[name].container
        return container is not None and self.path(container)[-1] == name


def compile_chart(recipe: Recipe) -> Chart:
    """The executable chart of ``recipe``; ``RecipeError`` lists every problem found."""
    return _Compiler(recipe).compile()


def _where(ref: PathRef) -> str:
    return f"path {ref.index + 1} of branch {ref.branch!r}"


def _transition(transition: Transition) -> str:
    return f"transition {transition.source} -> {transition.target}"


def _action(action: Action) -> str:
    return f"action {action.name!r} of step {action.step!r}"


def _is_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _is_at_least(value: float, minimum: float) -> bool:
    return math.isfinite(value) and value >= minimum


class _Compiler:
    """One compilation: collects problems while it builds the chart's parts."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.problems: list[str] = []
        self.kinds: dict[str, str] = {}  # node name -> "step" | "branch", first definition
        self.branch_defs: dict[str, Branch] = {}
        self.containers: dict[str, PathRef] = {}
        self.named: dict[str, Condition] = {}
        self.graph = NamedConditions({}, ())
        self.bounded = False  # named conditions have no cycle, so their size is finite
        self.action_names = frozenset(action.name for action in recipe.actions)
        self.explicit: dict[str, list[Edge]] = {}
        self.guards: dict[str, dict[int, Edge]] = {}

    def problem(self, element: str, reason: str) -> None:
        self.problems.append(f"{element}: {reason}")

    def node(self, name: str) -> str:
        return f"{self.kinds.get(name, 'step')} {name!r}"

    def compile(self) -> Chart:
        self.declare_nodes()
        self.assign_paths()
        initial = self.check_initial()
        for action in self.recipe.actions:
            self.check_action(action)
        self.check_duplicate_actions()
        self.check_retry("recipe", self.recipe.retry)
        self.check_step_retries()
        self.compile_named_conditions()
        for transition in self.recipe.transitions:
            self.compile_transition(transition)
        nodes = self.build_nodes()
        branches = self.build_branches()
        if initial is not None:
            self.check_reachable(initial, nodes, branches)
        self.check_ends(nodes)
        if self.problems or initial is None:
            raise RecipeError(self.problems)
        return Chart(
            recipe=self.recipe,
            initial=initial,
            nodes=nodes,
            branches=branches,
            conditions=self.named,
        )

    # -- nodes and paths ---------------------------------------------------------------------

    def declare_nodes(self) -> None:
        for step in self.recipe.steps:
            self.declare(step.name, "step")
        for branch in self.recipe.branches:
            if self.declare(branch.name, "branch"):
                self.branch_defs[branch.name] = branch

    def declare(self, name: str, kind: str) -> bool:
        if not name:
            self.problem(f"{kind} {name!r}", "the name must not be empty")
        previous = self.kinds.get(name)
        if previous is not None:
            self.problem(f"{kind} {name!r}", f"duplicate name (already used by a {previous})")
            return False
        self.kinds[name] = kind
        return True

    def assign_paths(self) -> None:
        for branch in self.branch_defs.values():
            if len(branch.branches) < 2:
                count = len(branch.branches)
                self.problem(f"branch {branch.name!r}", f"needs at least two paths (has {count})")
            for index, path in enumerate(branch.branches):
                self.assign_path(branch.name, index, path)
        self.check_self_containment()

    def assign_path(self, branch: str, index: int, path: list[str]) -> None:
        ref = PathRef(branch, index)
        if not path:
            self.problem(f"branch {branch!r}", f"path {index + 1} is empty")
        for name in path:
            if name not in self.kinds:
                self.problem(
                    f"branch {branch!r}",
                    f"path {index + 1} names {name!r}, which is neither a step nor a branch",
                )
            elif name == branch:
                self.problem(f"branch {branch!r}", f"path {index + 1} contains the branch itself")
            elif name in self.containers:
                previous = self.containers[name]
                self.problem(
                    self.node(name),
                    f"is in more than one path ({_where(previous)} and {_where(ref)})",
                )
            else:
                self.containers[name] = ref

    def check_self_containment(self) -> None:
        reported: set[str] = set()
        for branch in self.branch_defs:
            chain = self.enclosing_branches(branch)
            if branch in chain and branch not in reported:
                cycle = chain[: chain.index(branch)]
                reported.update(cycle, (branch,))
                through = ", ".join(repr(name) for name in reversed(cycle))
                self.problem(f"branch {branch!r}", f"contains itself through {through}")

    def enclosing_branches(self, name: str) -> list[str]:
        """The branches around ``name``, innermost first (stops after repeating one)."""
        chain: list[str] = []
        ref = self.containers.get(name)
        while ref is not None and ref.branch not in chain:
            chain.append(ref.branch)
            ref = self.containers.get(ref.branch)
        if ref is not None:
            chain.append(ref.branch)
        return chain

    def check_initial(self) -> str | None:
        initials = [step.name for step in self.recipe.steps if step.initial]
        if not initials:
            self.problem("recipe", 'no initial step (mark exactly one step "initial": true)')
            return None
        if len(initials) > 1:
            names = ", ".join(repr(name) for name in initials)
            self.problem("recipe", f"{len(initials)} initial steps ({names}); exactly one allowed")
            return None
        initial = initials[0]
        if initial in self.containers:
            where = _where(self.containers[initial])
            self.problem(f"step {initial!r}", f"the initial step must be top-level, not in {where}")
            return None
        return initial

    # -- actions -----------------------------------------------------------------------------

    def check_action(self, action: Action) -> None:
        """Where the action belongs, its timing, and whether its qualifier makes sense."""
        element = _action(action)
        kind = self.kinds.get(action.step)
        if kind is None:
            self.problem(element, f"step {action.step!r} does not exist")
        elif kind == "branch":
            self.problem(element, f"{action.step!r} is a branch; actions belong to steps")
        if not action.name:
            self.problem(element, "the name must not be empty")
        elif ":" in action.name:  # a reply's correlation id would name another action
            self.problem(
                element,
                "the name must not contain ':' (the correlation id of its commands is "
                "<job>:<action>:<attempt>)",
            )
        self.check_timing(element, action)
        if action.qualifier is Qualifier.R:
            self.check_reset(element, action)
        else:
            self.check_interaction(element, action)
        if action.retry is not None:
            self.check_retry(element, action.retry)

    def check_timing(self, element: str, action: Action) -> None:
        if action.qualifier in (Qualifier.L, Qualifier.D):
            if action.time_seconds is None or not _is_positive(action.time_seconds):
                self.problem(element, f"qualifier {action.qualifier} needs time_seconds > 0")
        elif action.time_seconds is not None:
            self.problem(element, "time_seconds is only for qualifiers L and D")
        if action.timeout_seconds is not None and not _is_positive(action.timeout_seconds):
            self.problem(element, "timeout_seconds must be > 0")

    def check_reset(self, element: str, action: Action) -> None:
        """R resets a stored action by name; its own interaction and type_id are ignored."""
        stored = any(
            other.name == action.name and other.qualifier is Qualifier.S
            for other in self.recipe.actions
        )
        if not stored:
            self.problem(
                element, f"qualifier R resets {action.name!r}, but no action of that name has S"
            )

    def check_interaction(self, element: str, action: Action) -> None:
        pulses = (Qualifier.P, Qualifier.P0, Qualifier.P1)
        if action.interaction is Interaction.PULL_EVENT and action.qualifier in pulses:
            self.problem(
                element,
                f"a pull_event action cannot have qualifier {action.qualifier}: "
                "pulses do not wait, so nothing would wait for the event",
            )
        if not action.type_id and action.pipeline is None:  # a pipeline's steps have theirs
            self.problem(element, "type_id must not be empty")
        if action.equipment == "":
            self.problem(element, "equipment must not be empty (leave it out for the default)")

    def check_duplicate_actions(self) -> None:
        # Names are unique in the whole recipe: results (``tighten.torque``) and correlation
        # ids (``{job}:{action}:{attempt}``) name an action by its name alone. R associations
        # repeat the name of the S association they reset.
        seen: dict[str, Action] = {}
        for action in self.recipe.actions:
            if action.qualifier is Qualifier.R:
                continue
            first = seen.setdefault(action.name, action)
            if first is not action:
                where = "in the step" if first.step == action.step else f"in step {first.step!r}"
                self.problem(_action(action), f"duplicate action name (already used {where})")

    def check_step_retries(self) -> None:
        for index, step in enumerate(self.recipe.steps):
            if step.retry is None:
                continue
            element = f"recipe.steps[{index}]"
            self.check_retry(element, step.retry)
            if not self.recipe.actions_of(step.name):
                self.problem(f"{element}.retry", "the step has no action to run again")

    def check_retry(self, element: str, retry: RetryPolicy) -> None:
        if retry.max_attempts < 1:
            self.problem(element, "retry max_attempts must be >= 1")
        if not _is_at_least(retry.backoff_seconds, 0):
            self.problem(element, "retry backoff_seconds must be >= 0")
        if not _is_at_least(retry.backoff_multiplier, 1):
            self.problem(element, "retry backoff_multiplier must be >= 1")
        if not _is_at_least(retry.max_backoff_seconds, 0):
            self.problem(element, "retry max_backoff_seconds must be >= 0")

    # -- conditions --------------------------------------------------------------------------

    def compile_named_conditions(self) -> None:
        for name, text in self.recipe.conditions.items():
            element = f"named condition {name!r}"
            if not is_name(name):
                self.problem(element, "the name must be letters, digits and _, not a keyword")
            try:
                self.named[name] = parse_condition(text)
            except ConditionError as error:
                self.problem(element, f"{error.element}: {error.reason}")
                continue
            self.check_references(element, self.named[name])
        self.graph = NamedConditions(self.named, self.recipe.conditions)
        cycles = self.graph.cycles()
        for cycle in cycles:
            self.problem(
                f"named condition {cycle[0]!r}", f"refers to itself ({' -> '.join(cycle)})"
            )
        self.bounded = not cycles
        if self.bounded:
            for name, condition in self.named.items():
                self.check_expansion(f"named condition {name!r}", condition)

    def check_expansion(self, element: str, condition: Condition) -> None:
        """Refuse a condition too large once its named conditions are written out.

        Only where the bound is crossed: a condition that is too large because a named
        condition it uses already is, is not reported again.
        """
        why = self.graph.expansion(condition).too_large()
        uses = named_uses(condition, self.named)
        if why is None or any(self.graph.expansion(self.named[n]).too_large() for n in uses):
            return
        used = ", ".join(f"{name!r} {count} times" for name, count in sorted(uses.items()))
        self.problem(
            element,
            f"condition {condition.text!r} expands to {why} when the named conditions it uses "
            f"are written out ({used}); use each named condition fewer times",
        )

    def check_references(self, element: str, condition: Condition) -> None:
        """Every ``<action>.<field>`` names an existing action."""
        for ref in sorted(condition.references(), key=str):
            if ref.kind == "result" and ref.name not in self.action_names:
                self.problem(
                    element,
                    f"condition {condition.text!r}: {str(ref)!r} refers to {ref.name!r}, "
                    "which is not an action",
                )

    def check_source_fields(
        self, element: str, transition: Transition, condition: Condition
    ) -> None:
        """A bare field name needs a source step with actions that could return it."""
        kind = self.kinds[transition.source]
        if kind == "step" and self.recipe.actions_of(transition.source):
            return
        source = transition.source
        why = f"{source!r} is a branch" if kind == "branch" else f"{source!r} has no actions"
        for name in sorted(self.graph.free_names(condition)):
            self.problem(
                element,
                f"{name!r} is neither a named condition nor a result field of "
                f"{kind} {source!r} ({why})",
            )

    # -- transitions -------------------------------------------------------------------------

    def compile_transition(self, transition: Transition) -> None:
        element = _transition(transition)
        known = True
        for role, name in (("source", transition.source), ("target", transition.target)):
            if name not in self.kinds:
                self.problem(element, f"{role} {name!r} is neither a step nor a branch")
                known = False
        condition = self.transition_condition(element, transition, known)
        if not known:
            return
        edge = Edge(transition.target, condition or ALWAYS, transition.priority, False)
        target_ref = self.containers.get(transition.target)
        if target_ref is not None and target_ref.branch == transition.source:
            self.add_guard(element, target_ref, edge)
        elif self.check_level(element, transition) and self.check_not_path_end(element, transition):
            self.explicit.setdefault(transition.source, []).append(edge)

    def transition_condition(
        self, element: str, transition: Transition, known: bool
    ) -> Condition | None:
        try:
            condition = parse_condition(transition.condition)
        except ConditionError as error:
            self.problem(element, f"{error.element}: {error.reason}")
            return None
        self.check_references(element, condition)
        if known:
            self.check_source_fields(element, transition, condition)
        if self.bounded:
            self.check_expansion(element, condition)
        return condition

    def add_guard(self, element: str, ref: PathRef, edge: Edge) -> None:
        branch = self.branch_defs[ref.branch]
        path = branch.branches[ref.index]
        if branch.type is BranchType.SIMULTANEOUS:
            self.problem(
                element,
                f"branch {branch.name!r} is simultaneous: its paths start together, "
                "so no transition from it may enter a path",
            )
        elif path[0] != edge.target:
            self.problem(
                element,
                f"a guard of selection branch {branch.name!r} must target the first node of a "
                f"path; {edge.target!r} is not first in path {ref.index + 1}",
            )
        elif ref.index in self.guards.setdefault(branch.name, {}):
            self.problem(element, f"path {ref.index + 1} of branch {branch.name!r} has two guards")
        else:
            self.guards[branch.name][ref.index] = edge

    def check_level(self, element: str, transition: Transition) -> bool:
        """Source and target in the same path (or both top-level): branches are not jumped."""
        source, target = transition.source, transition.target
        source_ref = self.containers.get(source)
        target_ref = self.containers.get(target)
        if source_ref == target_ref:
            return True
        if target_ref is not None and target_ref.branch not in self.enclosing_branches(source):
            self.problem(
                element,
                f"{target!r} is inside {_where(target_ref)}; "
                f"enter it through branch {target_ref.branch!r}",
            )
        else:
            assert source_ref is not None  # a top-level source only reaches the case above
            left = source_ref.branch
            self.problem(
                element,
                f"{source!r} is in {_where(source_ref)} and may only lead to a node of that "
                f"path; branch {left!r} is left only through transitions from {left!r}",
            )
        return False

    def check_not_path_end(self, element: str, transition: Transition) -> bool:
        """Finishing a path's last node finishes the path, so it has nowhere else to go."""
        ref = self.containers.get(transition.source)
        if ref is None or self.branch_defs[ref.branch].branches[ref.index][-1] != transition.source:
            return True
        self.problem(
            element,
            f"{transition.source!r} is the last node of {_where(ref)}: finishing it finishes "
            "the path, so it cannot have transitions (add a step after it)",
        )
        return False

    # -- the chart ---------------------------------------------------------------------------

    def build_nodes(self) -> dict[str, Node]:
        nodes: dict[str, Node] = {}
        for name, kind in self.kinds.items():
            explicit = sorted(self.explicit.get(name, ()), key=lambda edge: edge.priority)
            successors = tuple(explicit) or self.implicit_next(name)
            nodes[name] = Node(name, kind == "branch", self.containers.get(name), successors)
        return nodes

    def implicit_next(self, name: str) -> tuple[Edge, ...]:
        ref = self.containers.get(name)
        if ref is None:
            return ()
        path = self.branch_defs[ref.branch].branches[ref.index]
        position = path.index(name)
        if position + 1 == len(path):
            return ()
        return (Edge(path[position + 1], ALWAYS, 0, True),)

    def build_branches(self) -> dict[str, BranchInfo]:
        branches: dict[str, BranchInfo] = {}
        for name, branch in self.branch_defs.items():
            paths = tuple(tuple(path) for path in branch.branches)
            guards: tuple[Edge, ...] = ()
            if branch.type is BranchType.SELECTION:
                given = self.guards.get(name, {})
                guards = tuple(
                    given.get(index) or Edge(path[0] if path else "", ALWAYS, 0, True)
                    for index, path in enumerate(paths)
                )
            branches[name] = BranchInfo(name, branch.type, paths, guards)
        return branches

    def check_reachable(
        self, initial: str, nodes: Mapping[str, Node], branches: Mapping[str, BranchInfo]
    ) -> None:
        reached = _reachable(initial, nodes, branches)
        for name in self.kinds:
            if name not in reached:
                self.problem(self.node(name), f"is not reachable from the initial step {initial!r}")

    def check_ends(self, nodes: Mapping[str, Node]) -> None:
        if not any(node.container is None and not node.successors for node in nodes.values()):
            self.problem(
                "recipe",
                "the chart never ends: every top-level step and branch has outgoing transitions",
            )


def _reachable(
    initial: str, nodes: Mapping[str, Node], branches: Mapping[str, BranchInfo]
) -> set[str]:
    """Nodes that can become active, following successors, branch entries and path ends."""
    reached: set[str] = set()
    finished: set[str] = set()  # branches whose paths can finish
    pending: list[tuple[bool, str]] = [(False, initial)]  # (finishing a branch?, node)
    while pending:
        finishing, name = pending.pop()
        node = nodes.get(name)
        if node is None or name in (finished if finishing else reached):
            continue
        (finished if finishing else reached).add(name)
        if node.is_branch and not finishing:
            pending.extend((False, path[0]) for path in branches[name].paths if path)
            continue
        pending.extend((False, edge.target) for edge in node.successors)
        if node.container is not None and _is_last(node, branches):
            pending.append((True, node.container.branch))
    return reached


def _is_last(node: Node, branches: Mapping[str, BranchInfo]) -> bool:
    assert node.container is not None
    path = branches[node.container.branch].paths[node.container.index]
    return bool(path) and path[-1] == node.name
