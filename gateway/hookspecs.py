"""The gateway's plugin hooks (pluggy). Everything but the host is a plugin implementing these.

A plugin is a module or object with functions decorated ``@hookimpl`` and named like the specs
below. Registration hooks receive a ``register`` callback: the host checks names and duplicates in
one place. Hooks are synchronous; long-running work is returned as a ``Binding`` or ``Service``
whose async ``run`` the host starts in its task group.

The host builds the gateway in the order of the hooks below. A registration hook's ``gateway``
is a typed view of what is built before it (``gateway.phases``: ``DriverPhase``,
``InterpreterPhase``, ``JobControlPhase``, ``JobMethodsPhase``, ``ProcessorPhase``,
``ServicePhase``); reading a part
a later hook builds raises ``PluginError`` naming that hook. Only the lifecycle hooks and the
``run`` methods of bindings and services get the whole ``gateway.app.Gateway``.

**Per-gateway state**: an object a plugin needs in several hooks is built in the first hook
that has what it needs and kept with ``gateway.state.add(obj)``; later hooks, and services
through their ``gateway``, find it with ``gateway.state.find(Type)`` / ``.get(Type)``. Never keep
it in a module-level variable: one process may build several gateways.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.cli import Command
    from gateway.equipment import (
        CommandLink,
        EquipmentCommand,
        EquipmentDriver,
        EquipmentEvent,
        EquipmentReply,
    )
    from gateway.formats import RecipeFormat
    from gateway.jobmethods import JobMethods
    from gateway.jobstates import JobState
    from gateway.phases import (
        DriverPhase,
        InterpreterPhase,
        JobControlPhase,
        JobMethodsPhase,
        ProcessorPhase,
        ServicePhase,
    )
    from gateway.recipes import JobControl, RecipeInterpreter
    from gateway.settings import Settings
    from gateway.store import Store
    from gateway.transport import Binding, Processor, Service

ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]
"""An ASGI 3 application (scope, receive, send), as Starlette, FastAPI and others build them."""

PROJECT = "station_gateway"
ENTRY_POINT_GROUP = "station_gateway.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    """Declare settings sections, before any settings are read.

    Call ``register(section_name, dataclass)``; the dataclass fields (declared with
    ``gateway.settings.setting``) give each key's type, default and help. The values come from
    the ``[section_name]`` table of the settings file and ``GATEWAY_<SECTION>_<KEY>`` variables.
    """


@hookspec(firstresult=True)
def gateway_make_store(settings: Settings) -> Store | None:
    """Build the store, once, after settings are loaded: a ``Store`` over a Redis-protocol server.

    The contract is "a Redis-compatible server" (``gateway.store``), not an abstract backend:
    plugins use its Redis client directly, keeping every multi-key operation within one scope's
    hash slot. The default ``redis`` plugin connects to one node or an embedded redis-server;
    another plugin may return a ``Store`` over the same protocol (a Sentinel or Cluster client,
    say). The first plugin that returns a store wins. The host enters it (``async with``) before
    any binding or service starts and leaves it after they all stopped.
    """


@hookspec
def gateway_register_bindings(register: Callable[[Binding], None], settings: Settings) -> None:
    """Contribute transports (``register(binding)``), after settings are loaded.

    Binding names are unique; processors name the binding that serves them.
    """


@hookspec
def gateway_register_equipment_drivers(
    register: Callable[[EquipmentDriver], None], settings: Settings, gateway: DriverPhase
) -> None:
    """Contribute southbound equipment drivers (``register(driver)``).

    Fires after the store and bindings are built; ``gateway.equipment`` is the hub. A driver
    delivers the commands it ``serves`` and hands replies and events back through the hub;
    see ``gateway.equipment``.
    """


@hookspec
def gateway_register_recipe_interpreters(
    register: Callable[[RecipeInterpreter], None], settings: Settings, gateway: InterpreterPhase
) -> None:
    """Contribute recipe interpreters (``register(interpreter)``), one per ``dataschema`` URI.

    Fires after the equipment drivers, before job control and processors, so job management
    finds the interpreters in ``gateway.recipe_interpreters``. ``gateway.job_control`` is a
    handle to keep: it reaches the job control once the gateway is built (``PluginError`` when
    called earlier).
    """


@hookspec
def gateway_register_recipe_formats(register: Callable[[RecipeFormat], None]) -> None:
    """Contribute recipe formats (``register(format)``, ``gateway.formats.RecipeFormat``): a
    compiler and a pure executor each, which the recipe runtime (``gateway_runtime``) runs.

    Asked by the runtime when it registers its interpreters (one per format's ``dataschema``),
    and by the ``gateway recipe`` command (so a format takes no settings and keeps no
    per-gateway state).
    """


@hookspec(firstresult=True)
def gateway_make_job_control(gateway: JobControlPhase) -> JobControl | None:
    """Build the job control recipe interpreters report to (``gateway.job_control``).

    Fires once, after the interpreters are registered and before the processors.
    """


@hookspec(firstresult=True)
def gateway_make_job_methods(gateway: JobMethodsPhase) -> JobMethods | None:
    """Build the job methods northbound protocols call (``gateway.job_methods``).

    Fires once, right after ``gateway_make_job_control``. Every protocol serving the MES (MQTT,
    OPC UA) calls the same methods, so a job stored through one is controlled through another.
    """


@hookspec
def gateway_register_processors(
    register: Callable[[Processor], None], settings: Settings, gateway: ProcessorPhase
) -> None:
    """Contribute message processors (``register(processor)``), after settings are loaded.

    A processor names its subscriptions, the event types it handles and its binding; the
    dispatcher routes each incoming event to a processor subscribed to its topic that names its
    type, else to one that takes every type (``event_types=None``), the first registered within
    each kind: plugin order never lets a catch-all shadow the others. ``gateway`` gives
    the store, bindings, equipment, interpreters and job control.
    """


@hookspec
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    """Contribute long-running services (``register(service)``), after the processors.

    A service declares the roles it runs in (``gateway run --role ...``); the host starts the
    services of the selected role after the bindings are up.
    """


@hookspec
def gateway_register_http_apps(
    register: Callable[[str, ASGIApp], None], settings: Settings, gateway: ServicePhase
) -> None:
    """Contribute web applications to the HTTP endpoint (``register(prefix, app)``).

    ``app`` is an ASGI 3 application served under the path ``prefix`` (``/ui``; its scope has
    ``root_path`` = prefix and the full ``path``, as Starlette expects). Fires once, when the
    HTTP plugin builds its service (only when ``http.port`` is set), from its
    ``gateway_register_services``: ``gateway`` is that phase's view (store, job control,
    interpreters, processors). Prefixes are unique; ``/healthz``, ``/readyz`` and ``/metrics``
    are taken.
    """


@hookspec
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    """Contribute ``gateway`` CLI subcommands (``register(command)``), when the CLI is built."""


@hookspec
def gateway_startup(gateway: Gateway) -> None:
    """Fires once every binding and service of this instance has started."""


@hookspec
def gateway_shutdown(gateway: Gateway, reason: str) -> None:
    """Fires when the gateway begins to stop (signal, error, or request), before draining."""


@hookspec
def gateway_job_state_changed(
    scope: str, job_order_id: str, method: str, previous: JobState, current: JobState
) -> None:
    """Observer: a job changed state, after the change is stored.

    ``previous`` and ``current`` are ``JobState`` members (text, too: ``AllowedToStart.Ready``,
    ``Ended.Completed``); ``method`` is the OPC method or the interpreter's call that caused it.
    For metrics and audit; must not raise or block.
    """


@hookspec
def gateway_step_changed(scope: str, job_order_id: str, step: str, active: bool) -> None:
    """Observer: a recipe step (or branch) of a running job became active or inactive.

    Fires after the change is stored, on the instance that made it; a step entered and left
    within one change (no actions) is not reported. For progress displays, metrics and audit;
    must not raise or block.
    """


@hookspec
def gateway_job_method_called(
    scope: str,
    job_order_id: str,
    method: str,
    status: str,
    message: str | None,
    requested_by: str,
) -> None:
    """Observer: a job method (Store, Start, Pause, Abort...) was called and answered.

    ``status`` is the ReturnStatus name (``NO_ERROR`` when it was carried out), ``message`` why
    not; ``requested_by`` says who called: ``MES <source>`` for the MES's CloudEvents, the
    operator's name for a request from the web UI. Fires on the instance that answered, after
    the change (if any) is stored. For audit and traces; must not raise or block.
    """


@hookspec
def gateway_equipment_command_sent(command: EquipmentCommand, error: str | None) -> None:
    """Observer: a recipe command was handed to its equipment driver.

    ``error`` is why it could not be delivered (no driver, driver failure), ``None`` when the
    driver took it. The reply comes later, maybe to another instance, matched by
    ``command.correlation_id``. For traces and audit; must not raise or block.
    """


@hookspec
def gateway_equipment_replied(reply: EquipmentReply) -> None:
    """Observer: equipment answered a command (``reply.correlation_id``), and the answer was
    handed to the recipe engine. Fires on the instance whose driver received it. For traces
    and audit; must not raise or block.
    """


@hookspec
def gateway_equipment_event_received(event: EquipmentEvent) -> None:
    """Observer: equipment reported an event (for ``pull_event`` actions), handed to the recipe
    engine. Fires on the instance whose driver received it. For traces and audit; must not
    raise or block.
    """


@hookspec
def gateway_message_failed(binding: str, topic: str, code: str, reason: str) -> None:
    """Observer: a message could not be processed (malformed, unknown type, handler failed).

    ``code`` is the error code sent in the error reply (``invalid-request``, ``unknown-type``,
    ``processing-failed``). For metrics and audit; must not raise or block.
    """


@hookspec
def gateway_transport_connected(binding: str, session_present: bool, reconnect: bool) -> None:
    """Observer: a binding connected to its broker (``reconnect``: again, after losing it).

    ``session_present`` is false when the broker kept no session for this client: it may have
    restarted without persistence and lost what was retained too. Plugins that keep retained
    state on the broker (the MES publisher) publish it again. Must not raise or block.
    """


@hookspec(firstresult=True)
def gateway_command_link(command: EquipmentCommand) -> CommandLink | None:
    """Where the work of ``command`` can be followed: a ``CommandLink`` (a label, and the URL
    of a page showing it) from the plugin whose driver carried the command out, ``None`` from
    the others. The first answer wins.

    Asked when a job's progress is read (``gateway.recipes.ActionProgress.link``, the web UI's
    job page) for each action sent at least once, with ``command`` as its last try was sent
    (same correlation id, equipment, parameters). A driver delegating the command to another
    system (the line plugin: a job on a downstream station) names that system's job here.
    Called often, on any instance: answer from settings and the command alone, without I/O;
    must not raise.
    """
