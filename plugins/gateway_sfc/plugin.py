"""Hook implementations of the SFC recipe format plugin."""

from __future__ import annotations

from collections.abc import Callable

from gateway.formats import RecipeFormat
from gateway.hookspecs import hookimpl
from gateway_sfc.format import SfcFormat


@hookimpl
def gateway_register_recipe_formats(register: Callable[[RecipeFormat], None]) -> None:
    register(SfcFormat())
