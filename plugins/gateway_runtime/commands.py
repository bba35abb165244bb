"""``gateway recipe ...``: check and draw recipes of every installed format without running them.

``gateway recipe validate FILE...`` prints the format's ``OK: ...`` summary or every problem on
its own line (stderr, exit status 1); with several files (a shell glob) each line starts with its
file's name, as grep does. ``gateway recipe render FILE`` prints the recipe as Mermaid text,
``--format svg`` as the SVG drawing the web UI shows. FILE is a recipe, or a whole Work Master
whose ``Data`` holds the recipe and whose ``DataSchema`` names its format, as JSON or YAML
(``.yaml``/``.yml``); ``-`` reads standard input. A bare recipe's format is the one ``--type``
names, else the one that recognises its shape. So a recipe author sees every problem before the
MES sends it. ``--json`` prints one JSON document instead (validate: a list with each file's
``ok``, ``format``, ``summary`` and ``problems``; render: ``format``, ``as`` and ``drawing``), with
the same exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.cli import Command
from gateway.documents import DocumentError, read_document
from gateway.formats import Program, RecipeError, RecipeFormat
from gateway.plugins import GatewayPluginManager
from gateway_runtime.formats import installed_formats


class _InputError(Exception):
    """The file could not be turned into recipe data of a known format."""


@dataclass
class _Checked:
    """One file, compiled: its format and program, or why not."""

    file: str
    recipe_format: RecipeFormat | None = None
    program: Program | None = None
    problems: list[str] = field(default_factory=list)  # the format's, one per bad element
    error: str | None = None  # the file could not be read as a recipe of a known format

    def as_json(self) -> dict[str, Any]:
        ok = self.program is not None
        return {
            "file": self.file,
            "ok": ok,
            "format": None if self.recipe_format is None else self.recipe_format.name,
            "summary": self.recipe_format.summary(self.program)
            if self.recipe_format is not None and self.program is not None
            else None,
            "problems": self.problems if self.error is None else [self.error],
        }


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
        help="render: Mermaid flowchart text (default) or the drawing as SVG",
    )
    parser.add_argument(
        "--type",
        metavar="FORMAT",
        help="the recipe format of bare recipes (default: the one that recognises the file)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    formats = list(installed_formats(plugins).values())
    if not formats:
        print("gateway recipe: no recipe format is installed", file=sys.stderr)
        return 2
    if args.type is not None and args.type not in {f.name for f in formats}:
        names = ", ".join(sorted(f.name for f in formats))
        print(
            f"gateway recipe: no recipe format {args.type!r} (installed: {names})", file=sys.stderr
        )
        return 2
    files: list[str] = args.files
    if args.action == "render":
        if len(files) != 1:
            print("gateway recipe render: give exactly one FILE", file=sys.stderr)
            return 2
        return _render(_check(files[0], formats, args.type), args.format, args.json)
    checked = [_check(file, formats, args.type) for file in files]
    if args.json:
        print(json.dumps([entry.as_json() for entry in checked], indent=2))
    else:
        for entry in checked:
            _print_check(entry, prefix=f"{entry.file}: " if len(files) > 1 else "")
    return 0 if all(entry.program is not None for entry in checked) else 1


def _render(checked: _Checked, drawing_format: str, as_json: bool) -> int:
    if checked.recipe_format is None or checked.program is None:
        if as_json:
            print(json.dumps(checked.as_json(), indent=2))
        else:
            _print_check(checked, prefix="")
        return 1
    recipe_format, program = checked.recipe_format, checked.program
    drawing = (
        recipe_format.render_svg(program)
        if drawing_format == "svg"
        else recipe_format.render_mermaid(program)
    )
    if as_json:
        document = {"format": recipe_format.name, "as": drawing_format, "drawing": drawing}
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(drawing)
    return 0


def _print_check(checked: _Checked, prefix: str) -> None:
    """A file's summary on stdout, or each of its problems on stderr."""
    if checked.error is not None:
        print(f"{checked.file}: {checked.error}", file=sys.stderr)
    for problem in checked.problems:
        print(f"{prefix}{problem}", file=sys.stderr)
    if checked.recipe_format is not None and checked.program is not None:
        print(f"{prefix}{checked.recipe_format.summary(checked.program)}")


def _check(file: str, formats: list[RecipeFormat], chosen: str | None) -> _Checked:
    """``file`` read and compiled by its format."""
    checked = _Checked(file)
    try:
        checked.recipe_format, recipe = _recipe_data(read_document(file), formats, chosen)
        checked.program = checked.recipe_format.compile(recipe)
    except (DocumentError, _InputError) as error:
        checked.error = str(error)
    except RecipeError as error:
        checked.problems = list(error.problems)
    return checked


def _recipe_data(
    document: Any, formats: list[RecipeFormat], chosen: str | None
) -> tuple[RecipeFormat, Any]:
    """The format and recipe of a file's JSON: a Work Master's ``Data`` in the format of its
    ``DataSchema``, or the document itself in the format ``chosen`` or recognised."""
    if isinstance(document, Mapping) and "steps" not in document:
        data_key = next((key for key in ("Data", "data") if key in document), None)
        if data_key is not None:
            schema = document.get("DataSchema", document.get("dataschema"))
            if schema is None:
                return _bare(document[data_key], formats, chosen), document[data_key]
            found = next((f for f in formats if f.dataschema == schema), None)
            if found is None:
                names = ", ".join(sorted(f.dataschema for f in formats))
                raise _InputError(
                    f"the Work Master's DataSchema {schema!r} is not one of an installed "
                    f"format ({names})"
                )
            return found, document[data_key]
    return _bare(document, formats, chosen), document


def _bare(recipe: Any, formats: list[RecipeFormat], chosen: str | None) -> RecipeFormat:
    if chosen is not None:
        return next(f for f in formats if f.name == chosen)
    recognised = [f for f in formats if f.recognizes(recipe)]
    if not recognised and len(formats) == 1:
        return formats[0]
    if len(recognised) != 1:
        names = ", ".join(sorted(f.name for f in formats))
        raise _InputError(f"which recipe format is it? Say --type ({names})")
    return recognised[0]


def recipe_command() -> Command:
    return Command(
        "recipe", "validate or render a recipe file (every installed format)", _configure, _run
    )
