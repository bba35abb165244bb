"""The project's documents stand alone and their code runs: users have only the repository."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy/README.md"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_documents_point_only_to_what_users_have(document: Path) -> None:
    text = document.read_text()
    assert "../shared" not in text
    assert "DESIGN.md" not in text
    for linked in re.findall(r"`((?:docs|schemas|examples|deploy|benchmarks)/[\w./-]+)`", text):
        if "<" not in linked and "*" not in linked:
            places = (ROOT / linked, document.parent / linked)
            assert any(place.exists() for place in places), f"{document} names {linked}"


def test_the_line_protocol_driver_example_defines_a_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/drivers.md step 7, as printed: it imports, and declares its hooks."""
    text = (ROOT / "docs" / "drivers.md").read_text()
    start = text.index('"""gateway_acme_line/plugin.py')
    (tmp_path / "acme_line_example.py").write_text(text[start : text.index("```", start)])
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("acme_line_example")
    try:
        for hook in (
            "gateway_add_settings",
            "gateway_register_equipment_drivers",
            "gateway_register_services",
        ):
            assert hasattr(getattr(module, hook), "station_gateway_impl"), hook
    finally:
        sys.modules.pop("acme_line_example", None)
