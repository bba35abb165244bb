"""Hook implementations of the recipe runtime plugin."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.cli import Command
from gateway.errors import PluginError
from gateway.hookspecs import hookimpl
from gateway.recipes import RecipeInterpreter
from gateway.settings import Settings
from gateway.transport import Service
from gateway_runtime.commands import recipe_command
from gateway_runtime.coordination import Coordinator
from gateway_runtime.formats import installed_formats
from gateway_runtime.interpreter import FormatInterpreter, RuntimeService
from gateway_runtime.settings import RuntimeSettings

if TYPE_CHECKING:
    from gateway.jobmethods import JobMethods
    from gateway.phases import InterpreterPhase, ServicePhase

log = logging.getLogger(__name__)


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("runtime", RuntimeSettings)


@hookimpl
def gateway_register_recipe_interpreters(
    register: Callable[[RecipeInterpreter], None], settings: Settings, gateway: InterpreterPhase
) -> None:
    formats = installed_formats(gateway.plugins)
    if not formats:
        return
    if gateway.store is None:
        log.warning("recipe runtime off: it keeps its state in the store, and none is configured")
        return
    runtime = settings.get(RuntimeSettings)
    coordinator = gateway.state.add(Coordinator(runtime, gateway, formats))
    gateway.equipment.attach(coordinator)
    for recipe_format in formats.values():
        register(FormatInterpreter(coordinator, recipe_format))


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    coordinator = gateway.state.find(Coordinator)
    if coordinator is not None:
        try:
            methods: JobMethods | None = gateway.job_methods
        except PluginError:  # no job management: the caches' limit alone bounds them
            methods = None
        register(RuntimeService(coordinator, methods))


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(recipe_command())
