"""A recipe's named conditions as a graph: cycles, free names and how large they expand.

Named conditions refer to each other by bare name, so a recipe of a few lines can describe a
condition of billions of terms (``c_i = "c_{i+1} and c_{i+1}"`` over 31 levels). The engine
memoises named conditions within one evaluation, which keeps evaluation linear; the compiler
still refuses a recipe whose conditions, written out, exceed ``MAX_EXPANDED_TERMS`` terms or
``MAX_EXPANDED_DEPTH`` levels of nesting, because such a condition is a mistake that would
also defeat any tool that prints or translates it.

Every analysis here visits each named condition once (results are memoised per name, the
graph is walked with an explicit stack), so checking a recipe is linear in its size, whatever
the shape of the references.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gateway.conditions import Condition, Expr, NameRef, subexpressions

MAX_EXPANDED_TERMS = 10_000  # terms of a condition with its named conditions written out
MAX_EXPANDED_DEPTH = 200  # nesting levels likewise (evaluation recurses this deep)


@dataclass(frozen=True)
class Expansion:
    """The size of a condition with every named condition it uses written out in place."""

    terms: int
    depth: int

    def too_large(self) -> str | None:
        """Why this expansion is refused, or ``None`` when it is within the bounds."""
        if self.terms > MAX_EXPANDED_TERMS:
            return f"{self.terms} terms, more than the limit of {MAX_EXPANDED_TERMS}"
        if self.depth > MAX_EXPANDED_DEPTH:
            return f"{self.depth} levels of nesting, more than the limit of {MAX_EXPANDED_DEPTH}"
        return None


def named_uses(condition: Condition, named: Mapping[str, object]) -> Counter[str]:
    """How often ``condition`` refers to each of the names in ``named``."""
    uses: Counter[str] = Counter()
    stack: list[Expr] = [condition.expression]
    while stack:
        expression = stack.pop()
        if isinstance(expression, NameRef) and expression.reference.name in named:
            uses[expression.reference.name] += 1
        stack.extend(subexpressions(expression))
    return uses


def _post_order(roots: Iterable[str], neighbours: Callable[[str], Iterable[str]]) -> list[str]:
    """Every name reachable from ``roots``, each after the names it refers to (cycles cut)."""
    order: list[str] = []
    seen: set[str] = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(neighbours(root)))]
        while stack:
            name, pending = stack[-1]
            following = next((n for n in pending if n not in seen), None)
            if following is None:
                stack.pop()
                order.append(name)
            else:
                seen.add(following)
                stack.append((following, iter(neighbours(following))))
    return order


class NamedConditions:
    """The analyses the compiler needs over ``named`` (the parsed named conditions).

    ``declared`` holds every declared name, also those whose text did not parse, so a bare
    name is not taken for a result field just because its named condition is broken.
    """

    def __init__(self, named: Mapping[str, Condition], declared: Iterable[str]) -> None:
        self.named = named
        self.declared = frozenset(declared)
        self._uses = {name: named_uses(condition, named) for name, condition in named.items()}
        self._order = _post_order(named, lambda name: sorted(self._uses[name]))
        self._free: dict[str, frozenset[str]] = {}
        self._expansions: dict[str, Expansion] = {}

    def uses(self, name: str) -> Counter[str]:
        """The named conditions ``name`` refers to, with how often."""
        return self._uses[name]

    def cycles(self) -> list[tuple[str, ...]]:
        """Each cycle of references once, as ``(a, b, ..., a)``, in declaration order."""
        cycles: list[tuple[str, ...]] = []
        done: set[str] = set()
        in_cycle: set[str] = set()
        for root in self.named:
            if root in done:
                continue
            trail = [root]
            stack = [iter(sorted(self._uses[root]))]
            while stack:
                following = next(stack[-1], None)
                if following is None:
                    stack.pop()
                    done.add(trail.pop())
                elif following in trail:
                    cycle = (*trail[trail.index(following) :], following)
                    if not in_cycle.intersection(cycle):
                        cycles.append(cycle)
                    in_cycle.update(cycle)
                elif following not in done:
                    trail.append(following)
                    stack.append(iter(sorted(self._uses[following])))
        return cycles

    def free_names(self, condition: Condition) -> set[str]:
        """Bare names that are not named conditions, also through the named ones it uses."""
        if not self._free:
            for name in self._order:
                own = self._bare(self.named[name]) - self.declared
                inherited = (self._free.get(used, frozenset()) for used in self._uses[name])
                self._free[name] = frozenset(own.union(*inherited))
        names = self._bare(condition) - self.declared
        for used in self._bare(condition) & self.named.keys():
            names |= self._free[used]
        return names

    def expansion(self, condition: Condition) -> Expansion:
        """``condition``'s size with its named conditions written out (no cycles, please)."""
        if not self._expansions:
            for name in self._order:
                self._expansions[name] = self._expand(self.named[name].expression)
        return self._expand(condition.expression)

    def _expand(self, expression: Expr) -> Expansion:
        if isinstance(expression, NameRef):
            found = self._expansions.get(expression.reference.name)
            if found is not None:
                return found
        parts = [self._expand(part) for part in subexpressions(expression)]
        return Expansion(
            terms=1 + sum(part.terms for part in parts),
            depth=1 + max((part.depth for part in parts), default=0),
        )

    @staticmethod
    def _bare(condition: Condition) -> set[str]:
        return {ref.name for ref in condition.references() if ref.kind == "bare"}
