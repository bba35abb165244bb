"""Hook implementations of the SFC recipe engine plugin."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.cli import Command
from gateway.hookspecs import hookimpl
from gateway.recipes import RecipeInterpreter
from gateway.settings import Settings
from gateway.transport import Service
from gateway_sfc.commands import recipe_command
from gateway_sfc.coordination import Coordinator
from gateway_sfc.interpreter import SfcEngineService, SfcInterpreter
from gateway_sfc.settings import SfcSettings

if TYPE_CHECKING:
    from gateway.phases import InterpreterPhase, ServicePhase

log = logging.getLogger(__name__)


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("sfc", SfcSettings)


@hookimpl
def gateway_register_recipe_interpreters(
    register: Callable[[RecipeInterpreter], None], settings: Settings, gateway: InterpreterPhase
) -> None:
    if gateway.store is None:
        log.warning("SFC engine off: it keeps its state in the store, and no store is configured")
        return
    coordinator = gateway.state.add(Coordinator(settings.get(SfcSettings), gateway))
    gateway.equipment.attach(coordinator)
    register(SfcInterpreter(coordinator))


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    coordinator = gateway.state.find(Coordinator)
    if coordinator is not None:
        register(SfcEngineService(coordinator))


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(recipe_command())
