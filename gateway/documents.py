"""Reading JSON or YAML documents a person wrote: recipes, Work Masters, job orders.

``read_document(path)`` returns the parsed document or raises ``DocumentError`` with a message
fit for a terminal (which line and column, what is wrong). ``.yaml`` / ``.yml`` files are YAML
(people write recipes by hand, and YAML lets them comment and skip the quotes and braces);
anything else is JSON; ``-`` reads standard input, as JSON when it starts like JSON, else YAML.
YAML is read with the safe loader: plain data only, never Python objects.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

YAML_SUFFIXES = frozenset({".yaml", ".yml"})
STDIN = "-"


class DocumentError(Exception):
    """The file could not be read, or is not valid JSON / YAML (the message says where)."""


def read_document(path: str) -> Any:
    """The JSON or YAML document in ``path`` (``-``: standard input)."""
    text = _read_text(path)
    if path == STDIN:
        as_yaml = not text.lstrip().startswith(("{", "["))
    else:
        as_yaml = Path(path).suffix.lower() in YAML_SUFFIXES
    return parse_yaml(text) if as_yaml else parse_json(text)


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise DocumentError(
            f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise DocumentError("invalid JSON: nested too deeply") from None


def parse_yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise DocumentError(f"invalid YAML{where}: {error.problem or error}") from None
    except yaml.YAMLError as error:
        raise DocumentError(f"invalid YAML: {error}") from None
    except RecursionError:
        raise DocumentError("invalid YAML: nested too deeply") from None


def _read_text(path: str) -> str:
    try:
        if path == STDIN:
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise DocumentError(f"cannot read the file: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise DocumentError("not UTF-8 text") from None
