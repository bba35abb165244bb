"""The README's hook table matches ``gateway/hookspecs.py``: every hook, in order, with its
arguments (a hook added, renamed or given another argument must be documented)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from gateway import hookspecs

README = Path(__file__).parents[1] / "README.md"
_CALL = re.compile(r"`(gateway_\w+)\(([^)]*)\)`")


def documented_hooks() -> list[tuple[str, str]]:
    """(name, arguments) of every hook in the README's hook table, in table order."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| hook | when / what |") :]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        first_cell = line.split("|")[1]
        rows.extend(_CALL.findall(first_cell))
    return rows


def specified_hooks() -> list[tuple[str, list[str]]]:
    """(name, parameter names) of every hook spec, in source order."""
    specs = [
        (name, function)
        for name, function in vars(hookspecs).items()
        if name.startswith("gateway_") and inspect.isfunction(function)
    ]
    specs.sort(key=lambda item: inspect.getsourcelines(item[1])[1])
    return [(name, list(inspect.signature(function).parameters)) for name, function in specs]


def test_the_readme_hook_table_lists_every_hook_in_order() -> None:
    assert [name for name, _ in documented_hooks()] == [name for name, _ in specified_hooks()]


def test_the_readme_hook_table_names_each_hooks_arguments() -> None:
    arguments = dict(specified_hooks())
    for name, documented in documented_hooks():
        if documented.strip() == "...":
            continue  # an observer row abbreviates its arguments
        assert [part.strip() for part in documented.split(",")] == arguments[name], name
