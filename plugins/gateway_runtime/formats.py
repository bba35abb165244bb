"""The recipe formats the plugins install (``gateway_register_recipe_formats``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.errors import GatewayError
from gateway.formats import RecipeFormat

if TYPE_CHECKING:
    from gateway.plugins import GatewayPluginManager


def installed_formats(plugins: GatewayPluginManager) -> dict[str, RecipeFormat]:
    """Every registered format by its ``dataschema`` (two of one dataschema, or of one name,
    are a configuration error)."""
    formats: dict[str, RecipeFormat] = {}

    def register(recipe_format: RecipeFormat) -> None:
        for known in formats.values():
            if recipe_format.dataschema == known.dataschema or recipe_format.name == known.name:
                raise GatewayError(
                    f"two recipe formats are registered as {recipe_format.name!r} "
                    f"({recipe_format.dataschema})"
                )
        formats[recipe_format.dataschema] = recipe_format

    plugins.hook.gateway_register_recipe_formats(register=register)
    return formats
