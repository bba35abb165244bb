"""The web UI's view of sequences: the drawing and a job's progress."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from gateway.recipes import RecipeViewer
from gateway_sequence.executor import Sequencer
from gateway_sequence.interpreter import SequenceInterpreter
from gateway_sequence.model import load_sequence
from gateway_sequence.state import Run, Status
from gateway_sequence.view import progress, render_svg

EXAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "sequences" / "axle.json").read_text()
)
SVG = "{http://www.w3.org/2000/svg}"


def test_the_drawing_has_a_box_per_step_and_lights_the_active_ones() -> None:
    svg = ElementTree.fromstring(render_svg(load_sequence(EXAMPLE), {"tighten", "inspect"}))
    groups = {group.get("id"): group.get("class") for group in svg.iter(f"{SVG}g")}
    assert groups == {
        "step-position": None,
        "step-tighten": "active",
        "step-inspect": "active",
        "step-home": None,
    }


def test_progress_shows_the_par_block_and_its_commands_out() -> None:
    recipe = load_sequence(EXAMPLE)
    sequencer = Sequencer(recipe)
    run = Run("cell1", "J1", EXAMPLE, {}, Status.STARTING, started_at=100.0)
    sequencer.begin(run, 100.0)
    sequencer.on_reply(run, "position", 1, {"in_position": True}, None, 101.0)
    sequencer.on_reply(run, "inspect", 1, {"passed": True}, None, 102.0)
    shown = progress(recipe, run)
    assert shown.status == "running"
    assert [(step.name, step.branch) for step in shown.active] == [
        ("fit_and_inspect", True),
        ("tighten", False),
    ]
    phases = {action.name: (action.step, action.phase) for action in shown.actions}
    assert phases == {
        "position": ("position", "done"),
        "tighten": ("fit_and_inspect", "dispatched"),
        "inspect": ("fit_and_inspect", "done"),
    }
    tighten = next(action for action in shown.actions if action.name == "tighten")
    assert tighten.deadline == 101.0 + 60
    assert shown.results == {"position": {"in_position": True}, "inspect": {"passed": True}}


def test_the_interpreter_is_a_recipe_viewer() -> None:
    assert isinstance(SequenceInterpreter.__new__(SequenceInterpreter), RecipeViewer)
