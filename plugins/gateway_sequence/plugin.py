"""Hook implementations of the sequence recipe format plugin."""

from __future__ import annotations

from collections.abc import Callable

from gateway.formats import RecipeFormat
from gateway.hookspecs import hookimpl
from gateway_sequence.format import SequenceFormat


@hookimpl
def gateway_register_recipe_formats(register: Callable[[RecipeFormat], None]) -> None:
    register(SequenceFormat())
