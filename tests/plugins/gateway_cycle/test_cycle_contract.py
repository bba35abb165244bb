"""The cycle format keeps the runtime's format contract (``gateway.testing.formats``)."""

from __future__ import annotations

from typing import Any, ClassVar

from gateway.testing.formats import FIRST, SECOND, FormatContract
from gateway_cycle.format import CycleFormat


class TestCycleFormat(FormatContract):
    recipe_format = CycleFormat()
    two_commands: ClassVar[Any] = {
        "commands": [
            {"name": "first", "type_id": FIRST, "timeout_seconds": 5},
            {"name": "second", "type_id": SECOND, "timeout_seconds": 5},
        ]
    }
    invalid: ClassVar[Any] = {"commands": [{"name": "a"}]}
    invalid_path = "recipe.commands[0].type_id"
