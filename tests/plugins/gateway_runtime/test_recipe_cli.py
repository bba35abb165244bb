"""``gateway recipe validate|render FILE`` through the real CLI entry point."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway_sfc.model import DATASCHEMA

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "recipes"
REAR_AXLE = EXAMPLES / "rear_axle.json"


@pytest.fixture(autouse=True)
def only_the_sfc_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GATEWAY_* settings from the shell; load just the plugin that owns the command."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GATEWAY_PLUGINS_ALLOW", "runtime,sfc")


def write(tmp_path: Path, data: Any, name: str = "recipe.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["recipe", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize(
    ("name", "summary"),
    [
        ("rear_axle", "OK: 7 steps, 4 transitions, 4 actions"),
        ("loop_until_count", "OK: 4 steps, 4 transitions, 1 actions"),
        ("nested_branches", "OK: 8 steps, 5 transitions, 9 actions"),
    ],
)
def test_validate_examples(capsys: pytest.CaptureFixture[str], name: str, summary: str) -> None:
    assert run(capsys, "validate", str(EXAMPLES / f"{name}.json")) == (0, summary + "\n", "")


def test_validate_prints_every_problem_on_its_own_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = json.loads(REAR_AXLE.read_text())
    data["transitions"].append({"source": "Init", "target": "Nowhere"})
    data["actions"][0]["qualifier"] = "L"
    status, out, err = run(capsys, "validate", write(tmp_path, data))
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        "action 'position_axle' of step 'Positioning': qualifier L needs time_seconds > 0",
        "transition Init -> Nowhere: target 'Nowhere' is neither a step nor a branch",
    ]


def test_validate_reports_shape_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = {"steps": [{"name": 5}], "actions": [{"name": "a", "step": "A"}]}
    status, out, err = run(capsys, "validate", write(tmp_path, data))
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        "recipe.steps[0].name: invalid value for type, expected str",
        "recipe.actions[0].interaction: required field missing",
    ]


def test_a_command_without_its_type_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``type_id`` may be left out of the shape (a fan-out pipeline names its steps' types
    instead), but a plain command needs one."""
    data = {
        "steps": [{"name": "A", "initial": True}, {"name": "B"}],
        "transitions": [{"source": "A", "target": "B"}],
        "actions": [{"name": "a", "step": "A", "interaction": "push_command"}],
    }
    status, out, err = run(capsys, "validate", write(tmp_path, data))
    assert (status, out) == (1, "")
    assert err.splitlines() == ["action 'a' of step 'A': type_id must not be empty"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON at line 1 column 2: Expecting property name"),
        ('{"steps": [}', "invalid JSON at line 1 column 12: Expecting value"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_unreadable_content_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | bytes, message: str
) -> None:
    path = tmp_path / "broken.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    status, out, err = run(capsys, "validate", str(path))
    assert (status, out) == (1, "")
    assert err.startswith(f"{path}: {message}")


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    status, _, err = run(capsys, "render", str(missing))
    assert status == 1
    assert err == f"{missing}: cannot read the file: No such file or directory\n"


@pytest.mark.parametrize("data_key", ["Data", "data"])
def test_work_master_files_are_accepted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data_key: str
) -> None:
    work_master = {
        "ID": "WM-AXLE-FIT-001",
        "Description": {"Text": "Rear axle fitting and QA"},
        "Parameters": [{"ID": "torque_spec", "Value": "85Nm"}],
        data_key: json.loads(REAR_AXLE.read_text()),
        "DataSchema": DATASCHEMA,
    }
    status, out, _ = run(capsys, "validate", write(tmp_path, work_master))
    assert (status, out) == (0, "OK: 7 steps, 4 transitions, 4 actions\n")


def test_work_master_with_another_schema_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    work_master = {"ID": "WM-1", "Data": {}, "DataSchema": "https://example.com/bpmn"}
    status, _, err = run(capsys, "validate", write(tmp_path, work_master))
    assert status == 1
    assert "DataSchema 'https://example.com/bpmn' is not" in err


def test_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(REAR_AXLE.read_text()))
    assert run(capsys, "validate", "-")[:2] == (0, "OK: 7 steps, 4 transitions, 4 actions\n")


def test_render_prints_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "render", str(EXAMPLES / "nested_branches.json"))
    assert (status, err) == (0, "")
    assert out.startswith("flowchart TD\n")
    assert '[["Load<br/>clamp [S] push_command com.example.station.clamp.v1"]]' in out


def test_render_of_an_invalid_recipe_prints_its_problems(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = {"steps": [{"name": "A", "initial": True}, {"name": "B"}]}
    status, out, err = run(capsys, "render", write(tmp_path, data))
    assert (status, out) == (1, "")
    assert err == "step 'B': is not reachable from the initial step 'A'\n"


def test_unknown_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["recipe", "draw", str(REAR_AXLE)])
    assert caught.value.code == 2
    assert "invalid choice: 'draw'" in capsys.readouterr().err


def test_several_files_each_line_names_its_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = {"steps": [{"name": "A", "initial": True}, {"name": "B"}]}
    bad = write(tmp_path, broken, "bad.json")
    status, out, err = run(capsys, "validate", str(REAR_AXLE), bad)
    assert status == 1  # one bad file fails the run; the good one is still reported
    assert out == f"{REAR_AXLE}: OK: 7 steps, 4 transitions, 4 actions\n"
    assert err == f"{bad}: step 'B': is not reachable from the initial step 'A'\n"


def test_yaml_recipes_are_accepted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = "# written by hand\n" + yaml.safe_dump(json.loads(REAR_AXLE.read_text()))
    status, out, err = run(capsys, "validate", write(tmp_path, text, "axle.yaml"))
    assert (status, out, err) == (0, "OK: 7 steps, 4 transitions, 4 actions\n", "")


def test_yaml_syntax_errors_say_where(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "steps:\n  - name: A\n   initial: true\n", "broken.yml")
    status, out, err = run(capsys, "validate", path)
    assert (status, out) == (1, "")
    assert err.startswith(f"{path}: invalid YAML at line 3 column 4: ")


def test_render_takes_one_file(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "render", str(REAR_AXLE), str(REAR_AXLE))
    assert (status, out) == (2, "")
    assert "exactly one FILE" in err


def test_a_shell_glob_validates_every_example() -> None:
    """As a user types it: the shell expands the glob, the command takes every file."""
    command = f"{shlex.quote(sys.executable)} -m gateway.cli recipe validate {EXAMPLES}/*.json"
    done = subprocess.run(
        command, shell=True, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(list(EXAMPLES.glob("*.json"))) >= 3
    assert all(": OK: " in line for line in lines)


def test_validate_as_json_lists_each_file_with_its_problems(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = json.loads(REAR_AXLE.read_text())
    broken["steps"] = []
    status, out, err = run(
        capsys, "validate", "--json", str(REAR_AXLE), write(tmp_path, broken), "missing.json"
    )
    assert (status, err) == (1, "")
    good, bad, missing = json.loads(out)
    assert good == {
        "file": str(REAR_AXLE),
        "ok": True,
        "format": "sfc",
        "summary": "OK: 7 steps, 4 transitions, 4 actions",
        "problems": [],
    }
    assert (bad["ok"], bad["format"], bad["summary"]) == (False, "sfc", None)
    assert bad["problems"]
    assert all(isinstance(problem, str) for problem in bad["problems"])
    assert (missing["ok"], missing["format"]) == (False, None)
    assert "No such file" in missing["problems"][0]


def test_render_as_json_carries_the_drawing(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "render", "--json", "--format", "svg", str(REAR_AXLE))
    assert status == 0
    document = json.loads(out)
    assert (document["format"], document["as"]) == ("sfc", "svg")
    assert document["drawing"].startswith("<svg")


def test_validate_names_a_bad_fan_out_and_a_compensation_that_cannot_be(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recipe = json.loads(REAR_AXLE.read_text())
    push = next(a for a in recipe["actions"] if a["interaction"] == "push_command")
    push.pop("equipment", None)
    push["fan_out"] = {"members": ["nr1", "nr2"], "policy": "most"}
    pull = next(a for a in recipe["actions"] if a["interaction"] == "pull_event")
    pull["compensation"] = {"type_id": "com.example.undo.v1"}
    status, out, err = run(capsys, "validate", write(tmp_path, recipe))
    assert (status, out) == (1, "")
    push_at = recipe["actions"].index(push)
    pull_at = recipe["actions"].index(pull)
    assert f"recipe.actions[{push_at}].fan_out.policy: must be 'all', 'any'" in err
    assert f"recipe.actions[{pull_at}].compensation: a pull_event action sends nothing" in err
