"""The layering: the host imports no plugin; a plugin uses another only through its public API
(the package itself, whatever its ``__init__`` exports, or its ``clients``/``testing`` module)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[1]
PLUGINS = sorted(
    path.name for path in (ROOT / "plugins").iterdir() if (path / "__init__.py").exists()
)
PUBLIC_MODULES = frozenset({"clients", "testing"})


def imported_modules(path: Path) -> Iterator[str]:
    """Every absolute module ``path`` imports (at any level, TYPE_CHECKING blocks included)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_the_host_imports_no_plugin() -> None:
    offending = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        for module in imported_modules(path)
        if module.split(".")[0] in PLUGINS
    ]
    assert offending == []


def test_plugins_use_each_other_only_through_their_public_api() -> None:
    offending = []
    for plugin in PLUGINS:
        for path in sorted((ROOT / "plugins" / plugin).rglob("*.py")):
            for module in imported_modules(path):
                package, _, rest = module.partition(".")
                if package == plugin or package not in PLUGINS or not rest:
                    continue
                if rest.split(".")[0] not in PUBLIC_MODULES:
                    offending.append(f"{path.relative_to(ROOT)}: {module}")
    assert offending == []


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test modules by basename (the test tree has no packages): a second
    ``test_demo.py`` anywhere stops the whole collection."""
    names = [path.name for path in (ROOT / "tests").rglob("test_*.py") if "build" not in path.parts]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
