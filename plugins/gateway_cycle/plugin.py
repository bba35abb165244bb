"""Hook implementations of the cycle recipe format plugin."""

from collections.abc import Callable

from gateway.formats import RecipeFormat
from gateway.hookspecs import hookimpl
from gateway_cycle.format import CycleFormat


@hookimpl
def gateway_register_recipe_formats(register: Callable[[RecipeFormat], None]) -> None:
    register(CycleFormat())
