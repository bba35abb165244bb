"""The sequence format keeps the runtime's format contract (``gateway.testing.formats``)."""

from __future__ import annotations

from typing import Any, ClassVar

from gateway.testing.formats import FIRST, SECOND, FormatContract
from gateway_sequence.format import SequenceFormat


class TestSequenceFormat(FormatContract):
    recipe_format = SequenceFormat()
    two_commands: ClassVar[Any] = {
        "timeout_seconds": 5,
        "steps": [{"name": "first", "type_id": FIRST}, {"name": "second", "type_id": SECOND}],
    }
    invalid: ClassVar[Any] = {"steps": [{"name": "a"}]}
    invalid_path = "recipe.steps[0].type_id"
