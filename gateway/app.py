"""The gateway runtime: collect what plugins register, run it in one task group, stop cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from gateway.core import ALL_ROLES, CoreSettings
from gateway.equipment import EquipmentHub
from gateway.errors import ConnectionFailed, GatewayError, PluginError, SettingsError
from gateway.instances import InstanceRegistry
from gateway.jobmethods import JobMethods
from gateway.metrics import Metrics
from gateway.phases import BUILT_BY, PluginState
from gateway.plugins import ALWAYS_LOADED, GatewayPluginManager, build_plugin_manager
from gateway.recipes import JobControl, RecipeInterpreter
from gateway.resilience import Readiness, Resilience
from gateway.settings import Settings, SettingsRegistry, load_settings
from gateway.store import Store
from gateway.transport import Binding, Dispatcher, Processor, Service, starts_before_bindings

log = logging.getLogger(__name__)

ServiceRun = Callable[..., Awaitable[None]]


def describe_error(error: BaseException) -> str:
    """What went wrong, for a person: the errors inside task-group wrappers, not the wrapper.

    ``unhandled errors in a TaskGroup (1 sub-exception)`` says nothing; the leaves do. An
    ``OSError`` is shown by its reason (``Address already in use``), not its errno tuple.
    """
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(describe_error(inner) for inner in error.exceptions))
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def settings_registry(plugins: GatewayPluginManager) -> SettingsRegistry:
    """Every settings section the loaded plugins declare, in the order the plugins load (the
    host's own first, as the example settings file has them): pluggy calls hooks newest
    plugin first, so each implementation is called here, the host's first, then in
    registration order."""
    registry = SettingsRegistry()
    implementations = plugins.hook.gateway_add_settings.get_hookimpls()
    implementations.sort(key=lambda implementation: implementation.plugin_name not in ALWAYS_LOADED)
    for implementation in implementations:
        implementation.function(register=registry.register)
    return registry


def load_gateway_settings(
    plugins: GatewayPluginManager, path: Path | None, environ: Any = None
) -> Settings:
    return load_settings(settings_registry(plugins), path, environ, unloaded=plugins.skipped)


class Gateway:
    """One gateway instance: its settings, plugins and everything they registered."""

    def __init__(self, settings: Settings, plugins: GatewayPluginManager) -> None:
        self.settings = settings
        self.plugins = plugins
        core = settings.get(CoreSettings)
        self.instance_id = core.effective_instance_id
        self.source = core.effective_source
        self.role = core.role
        self.grace_seconds = core.shutdown_grace_seconds
        # Named readiness checks the long-running loops fail while the store or broker is
        # away (``/readyz`` names them), and the retry policy they share.
        self.readiness = Readiness()
        self.resilience = Resilience(
            self.readiness,
            minimum_seconds=core.retry_min_seconds,
            maximum_seconds=core.retry_max_seconds,
        )
        self.state = PluginState()
        self.store: Store | None = plugins.hook.gateway_make_store(settings=settings)
        self.instances = InstanceRegistry(self.store, self.instance_id) if self.store else None
        self.metrics = Metrics()
        self.bindings: dict[str, Binding] = {}
        plugins.hook.gateway_register_bindings(register=self._add_binding, settings=settings)
        # From here on, hooks get a view of what is built so far (``gateway.phases``).
        self.equipment = EquipmentHub(lambda: self.store, observers=plugins.hook)
        plugins.hook.gateway_register_equipment_drivers(
            register=self.equipment.add_driver,
            settings=settings,
            gateway=_PhaseView(self, "gateway_register_equipment_drivers", {"equipment"}),
        )
        self.recipe_interpreters: dict[str, RecipeInterpreter] = {}
        self._job_control: JobControl | None = None
        self._job_control_built = False
        plugins.hook.gateway_register_recipe_interpreters(
            register=self._add_interpreter,
            settings=settings,
            gateway=_PhaseView(
                self,
                "gateway_register_recipe_interpreters",
                {"equipment"},
                job_control=_JobControlHandle(self),
            ),
        )
        self._job_control = plugins.hook.gateway_make_job_control(
            gateway=_PhaseView(
                self, "gateway_make_job_control", {"equipment", "recipe_interpreters"}
            )
        )
        self._job_control_built = True
        self._job_methods: JobMethods | None = plugins.hook.gateway_make_job_methods(
            gateway=_PhaseView(
                self,
                "gateway_make_job_methods",
                {"equipment", "recipe_interpreters", "job_control"},
            )
        )
        self.processors: list[Processor] = []
        plugins.hook.gateway_register_processors(
            register=self._add_processor,
            settings=settings,
            gateway=_PhaseView(
                self,
                "gateway_register_processors",
                {"equipment", "recipe_interpreters", "job_control", "job_methods"},
            ),
        )
        self.services: list[Service] = []
        plugins.hook.gateway_register_services(
            register=self._add_service,
            settings=settings,
            gateway=_PhaseView(
                self,
                "gateway_register_services",
                {"equipment", "recipe_interpreters", "job_control", "job_methods", "processors"},
            ),
        )
        self._check_role()
        self.dispatcher = Dispatcher(
            [processor for processor in self.processors if self.runs(processor.roles)],
            source=self.source,
            dedupe=self.store.dedupe if self.store is not None else None,
            on_failure=plugins.hook.gateway_message_failed,
            metrics=self.metrics,
            resilience=self.resilience,
        )
        self.stop_reason: str | None = None
        self.failed = False
        self.started = False  # every binding and service is up (readiness)
        self._stopping: anyio.Event | None = None
        self._closing: anyio.Event | None = None

    @classmethod
    def from_environment(
        cls,
        config: Path | None = None,
        environ: Any = None,
        *,
        extra_plugins: dict[str, Any] | None = None,
    ) -> Gateway:
        """Build the plugin manager and settings the way ``gateway run`` does."""
        plugins = build_plugin_manager(environ, extra_plugins=extra_plugins)
        return cls(load_gateway_settings(plugins, config, environ), plugins)

    # -- registration -----------------------------------------------------------------------

    def _add_binding(self, binding: Binding) -> None:
        if binding.name in self.bindings:
            raise PluginError(f"two bindings are named {binding.name!r}")
        self.bindings[binding.name] = binding

    def _add_interpreter(self, interpreter: RecipeInterpreter) -> None:
        if interpreter.dataschema in self.recipe_interpreters:
            raise PluginError(f"two recipe interpreters for dataschema {interpreter.dataschema!r}")
        self.recipe_interpreters[interpreter.dataschema] = interpreter

    @property
    def job_control(self) -> JobControl:
        """Where interpreters report job progress (provided by the job management plugin)."""
        if self._job_control is None:
            if not self._job_control_built:
                raise PluginError(
                    "gateway.job_control is not built yet: gateway_make_job_control builds it "
                    "after the recipe interpreters; call it once the gateway is built"
                )
            raise PluginError("no plugin provides job control (is the jobs plugin blocked?)")
        return self._job_control

    @property
    def job_methods(self) -> JobMethods:
        """The MES's job methods, for northbound protocols (provided by job management)."""
        if self._job_methods is None:
            raise PluginError("no plugin provides job methods (is the jobs plugin blocked?)")
        return self._job_methods

    def _add_processor(self, processor: Processor) -> None:
        if any(existing.name == processor.name for existing in self.processors):
            raise PluginError(f"two processors are named {processor.name!r}")
        if processor.binding not in self.bindings:
            raise PluginError(
                f"processor {processor.name!r} needs binding {processor.binding!r}, "
                f"which no plugin registered (have: {', '.join(self.bindings) or 'none'})"
            )
        self.processors.append(processor)

    def _add_service(self, service: Service) -> None:
        if any(existing.name == service.name for existing in self.services):
            raise PluginError(f"two services are named {service.name!r}")
        self.services.append(service)

    def binding(self, name: str) -> Binding:
        try:
            return self.bindings[name]
        except KeyError:
            raise PluginError(f"no binding named {name!r}") from None

    @property
    def known_roles(self) -> list[str]:
        """``all``, ``gateway`` and every role a loaded plugin's service or processor declares."""
        declared = {role for service in self.services for role in service.roles}
        declared |= {role for processor in self.processors for role in processor.roles}
        declared.discard("*")
        return [ALL_ROLES, *sorted(declared | {"gateway"})]

    def _check_role(self) -> None:
        """An unknown role would start an instance that does nothing: refuse it."""
        if self.role not in self.known_roles:
            origin = self.settings.sources.get("gateway.role", "default")
            raise SettingsError(
                "gateway.role",
                f"unknown role {self.role!r} (from {origin}); the loaded plugins know: "
                f"{', '.join(self.known_roles)}",
            )

    def services_for_role(self) -> list[Service]:
        return [service for service in self.services if self.runs(service.roles)]

    def runs(self, roles: frozenset[str]) -> bool:
        """Whether something declared for ``roles`` runs in this instance's role."""
        return self.role == ALL_ROLES or self.role in roles or "*" in roles

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def stopping(self) -> anyio.Event:
        """Set when the gateway begins to stop; services stop taking new work when it is."""
        if self._stopping is None:
            self._stopping = anyio.Event()
        return self._stopping

    @property
    def closing(self) -> anyio.Event:
        """Set once the services have stopped: bindings then finish and disconnect."""
        if self._closing is None:
            self._closing = anyio.Event()
        return self._closing

    def request_stop(self, reason: str, *, failed: bool = False) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            log.info("stopping: %s", reason)
        self.failed = self.failed or failed
        self.stopping.set()

    async def run(
        self,
        *,
        handle_signals: bool = False,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Start the store, bindings and services; return once all have stopped."""
        self._stopping, self._closing = anyio.Event(), anyio.Event()
        self.stop_reason, self.failed = None, False
        self._log_settings()
        bindings, services = _RunningSet(), _RunningSet()
        async with AsyncExitStack() as stack:
            if self.store is not None:
                try:
                    await stack.enter_async_context(self.store)
                except ConnectionFailed as error:
                    raise self.explain(error) from None
                log.info("store %s connected", type(self.store).__name__)
            async with anyio.create_task_group() as tasks:
                if handle_signals:
                    await tasks.start(self._watch_signals, tasks.cancel_scope)
                if self.instances is not None:
                    await self.instances.beat()
                    tasks.start_soon(self.instances.run, self.stopping, self.resilience)
                try:
                    await self._start_all(tasks, bindings, services)
                except Exception as error:
                    log.error("start-up failed: %s", error)
                    self.request_stop(f"start-up failed: {error}", failed=True)
                else:
                    if self.stopping.is_set():  # asked to stop while still starting up
                        log.info("gateway %s stopped before it was up", self.instance_id)
                    else:
                        self._announce_start()
                    task_status.started()
                await self.stopping.wait()
                self.started = False
                self.plugins.hook.gateway_shutdown(gateway=self, reason=self.stop_reason or "")
                await self._drain(bindings, services)
                tasks.cancel_scope.cancel()
            if self.instances is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    try:
                        await self.instances.leave()
                    except Exception as error:  # the store is away: the entry ages out
                        log.warning("instance entry not removed: %s", error)
        log.info("gateway %s stopped: %s", self.instance_id, self.stop_reason)
        if self.failed:
            raise GatewayError(f"gateway stopped: {self.stop_reason}")

    def explain(self, error: ConnectionFailed) -> ConnectionFailed:
        """``error`` saying where the value of its setting came from (unless it says already)."""
        if error.origin is not None:
            return error
        return error.from_origin(self.settings.origin(error.setting))

    def _announce_start(self) -> None:
        log.info(
            "gateway %s started (role %s): bindings %s, services %s, event loop %s",
            self.instance_id,
            self.role,
            ", ".join(self.bindings) or "none",
            ", ".join(s.name for s in self.services_for_role()) or "none",
            _event_loop_name(),
        )
        self.started = True
        self.plugins.hook.gateway_startup(gateway=self)

    async def _start_all(
        self, tasks: anyio.abc.TaskGroup, bindings: _RunningSet, services: _RunningSet
    ) -> None:
        early = [s for s in self.services_for_role() if starts_before_bindings(s)]
        for service in early:
            await tasks.start(self._supervise, f"service {service.name}", service.run, services)
        for binding in self.bindings.values():
            await tasks.start(self._supervise, f"binding {binding.name}", binding.run, bindings)
        for service in self.services_for_role():
            if service not in early:
                await tasks.start(self._supervise, f"service {service.name}", service.run, services)

    async def _drain(self, bindings: _RunningSet, services: _RunningSet) -> None:
        """Stop in order within the grace period: services first, then the bindings.

        Services finishing their work may still publish (a status event, a command), so the
        transports close only once the services are done.
        """
        with anyio.move_on_after(self.grace_seconds) as grace:
            await services.wait_empty()
            self.closing.set()
            await bindings.wait_empty()
        if grace.cancelled_caught:
            still = ", ".join(sorted(services.names | bindings.names))
            log.warning("still running after %.1f s: %s; cancelling", self.grace_seconds, still)

    async def _supervise(
        self,
        name: str,
        run: ServiceRun,
        running: _RunningSet,
        *,
        task_status: TaskStatus[None],
    ) -> None:
        started = False

        def mark_started(value: None = None) -> None:
            nonlocal started
            started = True
            log.info("%s started", name)
            task_status.started()

        running.add(name)
        try:
            await run(self, task_status=_StartedCallback(mark_started))
        except Exception as error:
            if not started:
                if isinstance(error, ConnectionFailed):
                    error = self.explain(error)
                raise GatewayError(f"{name} failed to start: {describe_error(error)}") from error
            log.exception("%s failed", name)
            self.request_stop(f"{name} failed: {describe_error(error)}", failed=True)
        else:
            if not started:  # asked to stop before it was up: let start-up move on to stopping
                task_status.started()
            if not self.stopping.is_set():
                self.request_stop(f"{name} ended unexpectedly", failed=True)
            else:
                log.info("%s stopped", name)
        finally:
            running.discard(name)

    async def _watch_signals(
        self, scope: anyio.CancelScope, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()  # handlers are installed: a signal from now on stops gracefully
            async for received in signals:
                name = signal.Signals(received).name
                if self.stopping.is_set():
                    log.warning("%s again: cancelling without waiting", name)
                    scope.cancel()
                    return
                self.request_stop(f"received {name}")

    def _log_settings(self) -> None:
        """One short line per section: the values set (by the file or the environment), each
        cut to ``LOGGED_VALUE_CHARS``; ``gateway config show`` has them all."""
        sources = self.settings.sources
        for section, values in self.settings.masked().items():
            chosen = [key for key in values if f"{section}.{key}" in sources]
            if not chosen:
                log.info("settings [%s] defaults", section)
                continue
            shown = ", ".join(f"{key}={_short(values[key])}" for key in chosen)
            log.info("settings [%s] %s (%d default)", section, shown, len(values) - len(chosen))


LOGGED_VALUE_CHARS = 120


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= LOGGED_VALUE_CHARS else text[: LOGGED_VALUE_CHARS - 1] + "…"


class _StartedCallback:
    """A ``TaskStatus`` that runs a callback when the service says it has started."""

    def __init__(self, callback: Callable[[None], None]) -> None:
        self._callback = callback

    def started(self, value: None = None) -> None:
        self._callback(value)


class _RunningSet:
    """Names of the services still running, and a way to wait until there are none."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._empty = anyio.Event()

    def add(self, name: str) -> None:
        self.names.add(name)

    def discard(self, name: str) -> None:
        self.names.discard(name)
        if not self.names:
            self._empty.set()

    async def wait_empty(self) -> None:
        if self.names:
            await self._empty.wait()


class _PhaseView:
    """What a registration hook sees of the gateway being built (``gateway.phases``).

    The basics and the parts named in ``parts`` read through to the gateway; a part a later
    phase builds raises ``PluginError`` naming the hook that builds it.
    """

    _BASICS = frozenset(
        {
            "settings",
            "plugins",
            "instance_id",
            "source",
            "role",
            "metrics",
            "state",
            "store",
            "bindings",
            "instances",
            "stopping",
            "binding",
            "runs",
            "readiness",
            "resilience",
        }
    )

    def __init__(
        self, gateway: Gateway, hook: str, parts: set[str], *, job_control: Any = None
    ) -> None:
        self._gateway = gateway
        self._hook = hook
        self._parts = self._BASICS | parts
        self._job_control = job_control

    def __getattr__(self, name: str) -> Any:
        if name == "job_control" and self._job_control is not None:
            return self._job_control
        if name in self._parts:
            return getattr(self._gateway, name)
        if name in BUILT_BY:
            raise PluginError(
                f"gateway.{name} is not built yet when {self._hook} runs: it is built by "
                f"{BUILT_BY[name]}"
            )
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"<gateway {self._gateway.instance_id} as seen by {self._hook}>"


class _JobControlHandle:
    """``gateway.job_control`` for interpreters, built before job control is: every call
    goes to the job control once the gateway is built (``PluginError`` before)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gateway.job_control, name)


def _event_loop_name() -> str:
    """``uvloop`` or ``asyncio``: which loop runs this gateway (``gateway.event_loop``)."""
    loop = type(asyncio.get_running_loop())
    return "uvloop" if loop.__module__.startswith("uvloop") else "asyncio"
