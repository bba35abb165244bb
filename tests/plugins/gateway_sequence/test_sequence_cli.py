"""``gateway recipe validate|render`` on sequences and cycle recipes, through the CLI entry point
with every recipe format installed (each is told apart by its shape or its DataSchema)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gateway.cli import main
from gateway_cycle.format import DATASCHEMA as CYCLE
from gateway_sequence.model import DATASCHEMA as SEQUENCE

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
AXLE = str(EXAMPLES / "sequences" / "axle.json")
BOLTS = str(EXAMPLES / "cycles" / "three_bolts.json")


@pytest.fixture(autouse=True)
def the_recipe_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GATEWAY_* settings from the shell; the runtime and every format, nothing else."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GATEWAY_PLUGINS_ALLOW", "runtime,sfc,sequence,cycle")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["recipe", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_validate_tells_the_formats_of_bare_recipes_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sfc = str(EXAMPLES / "recipes" / "rear_axle.json")
    status, out, err = run(capsys, "validate", AXLE, BOLTS, sfc)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"{AXLE}: OK: 3 blocks (1 par), 4 steps",
        f"{BOLTS}: OK: 2 commands, 3 cycles",
        f"{sfc}: OK: 7 steps, 4 transitions, 4 actions",
    ]


def test_validate_names_every_problem_of_a_work_masters_sequence(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recipe = {"steps": [{"name": "a", "type_id": "x", "timeout_seconds": 0}, {"name": "b"}]}
    path = tmp_path / "wm.json"
    path.write_text(json.dumps({"ID": "WM", "DataSchema": SEQUENCE, "Data": recipe}))
    assert run(capsys, "validate", str(path)) == (
        1,
        "",
        "recipe.steps[0].timeout_seconds: must be > 0 (every command waits a bounded time), got 0\n"
        "recipe.steps[1].type_id: must be a non-empty string, got None\n",
    )


def test_a_work_master_picks_its_format_by_its_dataschema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "wm.json"
    path.write_text(json.dumps({"DataSchema": CYCLE, "Data": json.loads(Path(BOLTS).read_text())}))
    assert run(capsys, "validate", str(path)) == (0, "OK: 2 commands, 3 cycles\n", "")


@pytest.mark.parametrize("recipe", [AXLE, BOLTS])
def test_render_draws_mermaid_and_svg(capsys: pytest.CaptureFixture[str], recipe: str) -> None:
    status, out, _ = run(capsys, "render", recipe)
    assert status == 0
    assert out.startswith("flowchart TD\n")
    assert '["tighten' in out
    status, out, _ = run(capsys, "render", "--format", "svg", recipe)
    assert status == 0
    svg = ElementTree.fromstring(out)
    assert "tighten" in {g.get("data-action") for g in svg.iter("{http://www.w3.org/2000/svg}g")}
