"""The SFC format keeps the runtime's format contract (``gateway.testing.formats``)."""

from __future__ import annotations

from typing import Any, ClassVar

from gateway.testing.formats import FIRST, SECOND, FormatContract
from gateway_sfc.format import SfcFormat


def command(name: str, step: str, type_id: str) -> dict[str, Any]:
    return {
        "name": name,
        "step": step,
        "interaction": "push_command",
        "type_id": type_id,
        "timeout_seconds": 5,
    }


class TestSfcFormat(FormatContract):
    recipe_format = SfcFormat()
    two_commands: ClassVar[Any] = {
        "steps": [{"name": "A", "initial": True}, {"name": "B"}, {"name": "Done"}],
        "transitions": [{"source": "A", "target": "B"}, {"source": "B", "target": "Done"}],
        "actions": [command("first", "A", FIRST), command("second", "B", SECOND)],
    }
    invalid: ClassVar[Any] = {"steps": [{"name": 5}], "actions": []}
    invalid_path = "recipe.steps[0].name"
