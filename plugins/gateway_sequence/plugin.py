"""Hook implementations of the sequence recipe plugin."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl
from gateway.recipes import RecipeInterpreter
from gateway.settings import Settings
from gateway.transport import Service
from gateway_sequence.engine import SequenceEngine
from gateway_sequence.interpreter import SequenceInterpreter, SequenceService
from gateway_sequence.settings import SequenceSettings

if TYPE_CHECKING:
    from gateway.phases import InterpreterPhase, ServicePhase

log = logging.getLogger(__name__)


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("sequence", SequenceSettings)


# Attached after the other interpreters' sinks (trylast): the equipment hub asks the sinks in
# order whose job a reply is for, so the first format's replies do not wait for this one's look-up.
@hookimpl(trylast=True)
def gateway_register_recipe_interpreters(
    register: Callable[[RecipeInterpreter], None], settings: Settings, gateway: InterpreterPhase
) -> None:
    if gateway.store is None:
        log.warning("sequence engine off: it keeps its state in the store, and none is configured")
        return
    engine = gateway.state.add(SequenceEngine(settings.get(SequenceSettings), gateway))
    gateway.equipment.attach(engine)
    register(SequenceInterpreter(engine))


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    engine = gateway.state.find(SequenceEngine)
    if engine is not None:
        register(SequenceService(engine))
