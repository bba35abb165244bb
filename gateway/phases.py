"""What registration hooks see of a gateway being built, and where plugins keep their state.

The host builds a gateway in phases, each one a hook (see ``gateway.hookspecs``): the store,
the bindings, the equipment drivers, the recipe interpreters, job control, the processors, the
services. A hook that takes ``gateway`` gets a typed view of what is built *before* it runs,
never the half-built object:

============================================  =============================================
hook                                          ``gateway`` is a
============================================  =============================================
``gateway_register_equipment_drivers``        ``DriverPhase``: basics + ``equipment``
``gateway_register_recipe_interpreters``      ``InterpreterPhase``: + ``job_control`` (a
                                              handle, usable once the gateway is built)
``gateway_make_job_control``                  ``JobControlPhase``: + ``recipe_interpreters``
``gateway_make_job_methods``                  ``JobMethodsPhase``: + ``job_control``
``gateway_register_processors``               ``ProcessorPhase``: + ``job_methods``
``gateway_register_services``                 ``ServicePhase``: + ``processors``
``gateway_startup`` / ``gateway_shutdown``,
``Binding.run`` / ``Service.run``             the whole ``gateway.app.Gateway``
============================================  =============================================

The basics (``GatewayBasics``) are there from the first of these hooks on: settings, plugin
manager, instance id, source, role, metrics, the store (``None`` without a store plugin), the
bindings, the instance registry, ``stopping`` (an event for running code), ``state``, and
``readiness`` / ``resilience`` (``gateway.resilience``: how loops survive outages).
Reading something a later phase builds raises ``PluginError`` naming the hook that builds it.
The full ``Gateway`` satisfies every phase protocol, so code typed against a phase runs with
either.

**Per-gateway state.** A plugin that needs the same object in several hooks (job management's
manager, the SFC engine's coordinator) builds it in the first hook that has what it needs and
adds it to ``gateway.state``; later hooks (and the plugin's services, which get the whole
gateway) look it up by its type. The key is the plugin's own class, so a plugin never finds
another's object unless that class is part of the other plugin's public API::

    @hookimpl
    def gateway_make_job_control(gateway: JobControlPhase) -> JobControl | None:
        manager = gateway.state.add(JobManager(...))
        return JobsControl(manager)

    @hookimpl
    def gateway_register_processors(register, settings, gateway: ProcessorPhase) -> None:
        manager = gateway.state.find(JobManager)   # None: job control was not built here
        ...

Objects live as long as their gateway; two gateways in one process never share them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from gateway.errors import PluginError

if TYPE_CHECKING:
    import anyio

    from gateway.equipment import EquipmentHub
    from gateway.instances import InstanceRegistry
    from gateway.jobmethods import JobMethods
    from gateway.metrics import Metrics
    from gateway.plugins import GatewayPluginManager
    from gateway.recipes import JobControl, RecipeInterpreter
    from gateway.resilience import Readiness, Resilience
    from gateway.settings import Settings
    from gateway.store import Store
    from gateway.transport import Binding, Processor

T = TypeVar("T")


class PluginState:
    """Objects plugins keep for one gateway, one per type (see the module docstring)."""

    def __init__(self) -> None:
        self._objects: dict[type[Any], Any] = {}

    def add(self, value: T, *, key: type[T] | None = None) -> T:
        """Keep ``value`` under ``key`` (default: its own class) and return it."""
        kind = type(value) if key is None else key
        if kind in self._objects:
            raise PluginError(f"this gateway already keeps a {kind.__qualname__}")
        self._objects[kind] = value
        return value

    def find(self, key: type[T]) -> T | None:
        """The object kept under ``key``, or ``None``."""
        return cast("T | None", self._objects.get(key))

    def get(self, key: type[T]) -> T:
        """The object kept under ``key``; ``PluginError`` when no hook added one."""
        value = self.find(key)
        if value is None:
            raise PluginError(
                f"this gateway keeps no {key.__qualname__}: the plugin that owns it adds it "
                "in an earlier hook (was that hook skipped, or the plugin blocked?)"
            )
        return value

    def __contains__(self, key: type[Any]) -> bool:
        return key in self._objects


# -- the phases, as protocols the views and the whole gateway satisfy ---------------------------


class GatewayBasics(Protocol):
    """What every hook that takes ``gateway`` may use."""

    @property
    def settings(self) -> Settings: ...

    @property
    def plugins(self) -> GatewayPluginManager: ...

    @property
    def instance_id(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def state(self) -> PluginState: ...

    @property
    def store(self) -> Store | None: ...

    @property
    def bindings(self) -> Mapping[str, Binding]: ...

    @property
    def instances(self) -> InstanceRegistry | None: ...

    @property
    def readiness(self) -> Readiness:
        """Named readiness checks (``/readyz``); failing ones name the loop and why."""
        ...

    @property
    def resilience(self) -> Resilience:
        """How long-running loops survive store and broker outages (``gateway.resilience``)."""
        ...

    @property
    def stopping(self) -> anyio.Event:
        """Set when the running gateway begins to stop (for code that runs later)."""
        ...

    def binding(self, name: str) -> Binding:
        """The binding named ``name``; ``PluginError`` when none is."""
        ...

    def runs(self, roles: frozenset[str]) -> bool:
        """Whether something declared for ``roles`` runs in this instance's role."""
        ...


class DriverPhase(GatewayBasics, Protocol):
    """``gateway_register_equipment_drivers``: the equipment hub exists."""

    @property
    def equipment(self) -> EquipmentHub: ...


class InterpreterPhase(DriverPhase, Protocol):
    """``gateway_register_recipe_interpreters``: ``job_control`` is a handle to keep.

    Job control is built after the interpreters (it needs them), so an interpreter keeps this
    handle and calls it when jobs run; a call before the gateway is built raises
    ``PluginError``.
    """

    @property
    def job_control(self) -> JobControl: ...


class JobControlPhase(DriverPhase, Protocol):
    """``gateway_make_job_control``: every recipe interpreter is registered."""

    @property
    def recipe_interpreters(self) -> Mapping[str, RecipeInterpreter]: ...


class JobMethodsPhase(JobControlPhase, Protocol):
    """``gateway_make_job_methods``: job control is built."""

    @property
    def job_control(self) -> JobControl: ...


class ProcessorPhase(JobMethodsPhase, Protocol):
    """``gateway_register_processors``: job control and the job methods are built."""

    @property
    def job_methods(self) -> JobMethods:
        """The MES's job methods (``PluginError`` when no plugin provides them)."""
        ...


class ServicePhase(ProcessorPhase, Protocol):
    """``gateway_register_services``: every processor is registered."""

    @property
    def processors(self) -> Sequence[Processor]: ...


# Which hook builds each part, for the error a too-early read gets.
BUILT_BY: Mapping[str, str] = {
    "equipment": "the host, before gateway_register_equipment_drivers",
    "recipe_interpreters": "gateway_register_recipe_interpreters",
    "job_control": "gateway_make_job_control",
    "job_methods": "gateway_make_job_methods",
    "processors": "gateway_register_processors",
    "services": "gateway_register_services",
    "dispatcher": "the host once every processor is registered (use it when running)",
    "closing": "the host when it runs the gateway (use it in Binding.run / Service.run)",
    "started": "the host when it runs the gateway",
}
