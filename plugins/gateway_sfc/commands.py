"""``gateway recipe ...``: check and draw SFC recipes without running them.

``gateway recipe validate FILE...`` prints ``OK: <n> steps, <n> transitions, <n> actions`` or
every problem on its own line (stderr, exit status 1); with several files (a shell glob) each
line starts with its file's name, as grep does. ``gateway recipe render FILE`` prints the chart
as Mermaid text, ``--format svg`` as the SVG drawing the web UI shows. FILE is a recipe, or a
whole Work Master whose ``Data`` holds the recipe, as JSON or YAML (``.yaml``/``.yml``); ``-``
reads standard input. So a recipe author sees every problem before the MES sends it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from gateway.cli import Command
from gateway.documents import DocumentError, read_document
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
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="recipe or Work Master, JSON or YAML ('-' for stdin); render takes one",
    )
    parser.add_argument(
        "--format",
        choices=["mermaid", "svg"],
        default="mermaid",
        help="render: Mermaid flowchart text (default) or the SFC drawing as SVG",
    )


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    files: list[str] = args.files
    if args.action == "render":
        if len(files) != 1:
            print("gateway recipe render: give exactly one FILE", file=sys.stderr)
            return 2
        chart = _load(files[0], prefix="")
        if chart is None:
            return 1
        sys.stdout.write(render_svg(chart) if args.format == "svg" else render_mermaid(chart))
        return 0
    status = 0
    for file in files:
        prefix = f"{file}: " if len(files) > 1 else ""
        chart = _load(file, prefix)
        if chart is None:
            status = 1
        else:
            print(f"{prefix}{_summary(chart)}")
    return status


def _load(file: str, prefix: str) -> Chart | None:
    """The chart in ``file``; ``None`` after printing why there is none."""
    try:
        return load_chart(_recipe_data(read_document(file)))
    except (DocumentError, _InputError) as error:
        print(f"{file}: {error}", file=sys.stderr)
    except RecipeError as error:
        for problem in error.problems:
            print(f"{prefix}{problem}", file=sys.stderr)
    return None


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
