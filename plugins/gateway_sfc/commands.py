"""``gateway recipe ...``: check and draw SFC recipes without running them.

``gateway recipe validate FILE`` prints ``OK: <n> steps, <n> transitions, <n> actions`` or every
problem on its own line (stderr, exit status 1); ``gateway recipe render FILE`` prints the chart
as Mermaid text, ``--format svg`` as the SVG drawing the web UI shows. FILE is a recipe, or a
whole Work Master whose ``Data`` holds the recipe, as JSON; ``-`` reads standard input. So a
recipe author sees every problem before the MES sends it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.cli import Command
from gateway.plugins import GatewayPluginManager
from gateway_sfc.chart import Chart, RecipeError
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.render import render_mermaid
from gateway_sfc.svg import render_svg
from gateway_sfc.validation import load_chart


class _InputError(Exception):
    """The file could not be turned into recipe data."""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=["validate", "render"], help="validate: check; render: draw (--format)"
    )
    parser.add_argument("file", help="recipe or Work Master JSON file ('-' for stdin)")
    parser.add_argument(
        "--format",
        choices=["mermaid", "svg"],
        default="mermaid",
        help="render: Mermaid flowchart text (default) or the SFC drawing as SVG",
    )


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    try:
        chart = load_chart(_recipe_data(_read_json(args.file)))
    except _InputError as error:
        print(f"{args.file}: {error}", file=sys.stderr)
        return 1
    except RecipeError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return 1
    if args.action == "render":
        sys.stdout.write(render_svg(chart) if args.format == "svg" else render_mermaid(chart))
    else:
        print(_summary(chart))
    return 0


def _read_json(file: str) -> Any:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as error:
        raise _InputError(f"cannot read the file: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise _InputError("not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _InputError(
            f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise _InputError("invalid JSON: nested too deeply") from None


def _recipe_data(document: Any) -> Any:
    """The recipe in a file's JSON: the document itself, or a Work Master's ``Data``.

    A Work Master is recognised by its ``Data`` / ``data`` key when the document has no
    ``steps``; its ``DataSchema``, when given, must be the SFC recipe schema.
    """
    if not isinstance(document, Mapping) or {"steps", "Steps"} & document.keys():
        return document
    data_key = next((key for key in ("Data", "data") if key in document), None)
    if data_key is None:
        return document
    schema = document.get("DataSchema", document.get("dataschema"))
    if schema is not None and schema != DATASCHEMA:
        raise _InputError(f"the Work Master's DataSchema {schema!r} is not {DATASCHEMA!r}")
    return document[data_key]


def _summary(chart: Chart) -> str:
    recipe = chart.recipe
    return (
        f"OK: {len(recipe.steps)} steps, {len(recipe.transitions)} transitions, "
        f"{len(recipe.actions)} actions"
    )


def recipe_command() -> Command:
    return Command("recipe", "validate or render an SFC recipe file", _configure, _run)
