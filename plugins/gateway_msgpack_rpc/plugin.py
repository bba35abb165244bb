"""Hook implementations of the MessagePack-RPC plugin: settings, binding, driver, processor."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.core import CoreSettings
from gateway.errors import PluginError
from gateway.hookspecs import hookimpl
from gateway.store import KnownScopes
from gateway_msgpack_rpc.binding import BINDING, MsgpackRpcBinding
from gateway_msgpack_rpc.driver import MsgpackRpcDriver, equipment_processor
from gateway_msgpack_rpc.forwarding import Forwarding
from gateway_msgpack_rpc.settings import SECTION, MsgpackRpcSettings

if TYPE_CHECKING:
    from gateway.equipment import EquipmentDriver
    from gateway.phases import DriverPhase, ProcessorPhase, ServicePhase
    from gateway.settings import Settings
    from gateway.transport import Binding, Processor, Service


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register(SECTION, MsgpackRpcSettings)


@hookimpl
def gateway_register_bindings(register: Callable[[Binding], None], settings: Settings) -> None:
    source = settings.get(CoreSettings).effective_source
    register(MsgpackRpcBinding(settings.get(MsgpackRpcSettings), source=source))


@hookimpl
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
) -> None:
    # The driver builds its forwarding; the binding finds it in ``gateway.state`` when it runs.
    driver = MsgpackRpcDriver(_binding(gateway), source=gateway.source, gateway=gateway)
    if driver.forwarding is not None:
        gateway.state.add(driver.forwarding)
    register(driver)


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    rpc = settings.get(MsgpackRpcSettings)
    if not (rpc.port or rpc.equipment):  # no RPC equipment: nothing to forward
        return
    forwarding = gateway.state.find(Forwarding)
    if forwarding is not None:
        register(forwarding)


@hookimpl
def gateway_register_processors(
    register: Callable[[Processor], None], settings: Settings, gateway: ProcessorPhase
) -> None:
    rpc = settings.get(MsgpackRpcSettings)
    if rpc.port or rpc.equipment:  # otherwise nothing can arrive over RPC
        scopes = KnownScopes(lambda: gateway.store)
        register(equipment_processor(gateway.equipment, rpc.topic_prefix, scopes))


def _binding(gateway: DriverPhase) -> MsgpackRpcBinding:
    binding = gateway.binding(BINDING)
    if not isinstance(binding, MsgpackRpcBinding):
        raise PluginError(f"binding {BINDING!r} is not the MessagePack-RPC binding")
    return binding
