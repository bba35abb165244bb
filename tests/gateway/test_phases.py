"""Build phases: hooks see what is built before them, and plugins keep per-gateway state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.errors import PluginError
from gateway.hookspecs import hookimpl
from gateway.phases import PluginState
from gateway.testing import WITHOUT_DEFAULT_PLUGINS


def build(plugin: object) -> Gateway:
    environ = {"GATEWAY_PLUGINS_BLOCK": WITHOUT_DEFAULT_PLUGINS}
    return Gateway.from_environment(environ=environ, extra_plugins={"probe": plugin})


@dataclass
class Reads:
    """Reads ``part`` of the gateway in ``hook`` and records what happened."""

    hook: str
    part: str
    outcome: list[str] = field(default_factory=list)

    def read(self, hook: str, gateway: Any) -> None:
        if hook != self.hook:
            return
        try:
            getattr(gateway, self.part)
        except PluginError as error:
            self.outcome.append(f"PluginError: {error}")
        else:
            self.outcome.append("ok")

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Any, settings: Any, gateway: Any
    ) -> None:
        self.read("drivers", gateway)

    @hookimpl
    def gateway_register_recipe_interpreters(
        self, register: Any, settings: Any, gateway: Any
    ) -> None:
        self.read("interpreters", gateway)

    @hookimpl
    def gateway_make_job_control(self, gateway: Any) -> None:
        self.read("job_control", gateway)

    @hookimpl
    def gateway_register_processors(self, register: Any, settings: Any, gateway: Any) -> None:
        self.read("processors", gateway)

    @hookimpl
    def gateway_register_services(self, register: Any, settings: Any, gateway: Any) -> None:
        self.read("services", gateway)


@pytest.mark.parametrize(
    ("hook", "part", "built_by"),
    [
        ("drivers", "recipe_interpreters", "gateway_register_recipe_interpreters"),
        ("interpreters", "recipe_interpreters", "gateway_register_recipe_interpreters"),
        ("job_control", "processors", "gateway_register_processors"),
        ("processors", "processors", "gateway_register_processors"),
        ("services", "services", "gateway_register_services"),
        ("services", "dispatcher", "once every processor is registered"),
    ],
)
def test_reading_a_part_built_later_is_a_plugin_error_naming_its_builder(
    hook: str, part: str, built_by: str
) -> None:
    probe = Reads(hook, part)
    build(probe)
    assert len(probe.outcome) == 1
    assert probe.outcome[0].startswith(f"PluginError: gateway.{part} is not built yet")
    assert built_by in probe.outcome[0]


@pytest.mark.parametrize(
    ("hook", "part"),
    [
        ("drivers", "equipment"),
        ("drivers", "store"),
        ("interpreters", "equipment"),
        ("job_control", "recipe_interpreters"),
        ("processors", "recipe_interpreters"),
        ("services", "processors"),
    ],
)
def test_parts_built_before_a_hook_are_there(hook: str, part: str) -> None:
    probe = Reads(hook, part)
    build(probe)
    assert probe.outcome == ["ok"]


class KeepsInterpreterHandle:
    """An interpreter plugin that keeps ``gateway.job_control`` and calls it later."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.early: list[str] = []

    @hookimpl
    def gateway_register_recipe_interpreters(
        self, register: Any, settings: Any, gateway: Any
    ) -> None:
        self.handle = gateway.job_control
        try:
            self.handle.state  # noqa: B018 - a call this early must fail clearly
        except PluginError as error:
            self.early.append(str(error))


def test_the_job_control_handle_says_when_it_is_used_too_early_and_works_after() -> None:
    plugin = KeepsInterpreterHandle()
    gateway = build(plugin)
    assert plugin.early == [
        "gateway.job_control is not built yet: gateway_make_job_control builds it after the "
        "recipe interpreters; call it once the gateway is built"
    ]
    # Built without the jobs plugin: the handle now says nobody provides job control.
    with pytest.raises(PluginError, match="no plugin provides job control"):
        plugin.handle.state  # noqa: B018
    with pytest.raises(PluginError, match="no plugin provides job control"):
        gateway.job_control  # noqa: B018


class Counter:
    def __init__(self) -> None:
        self.value = 0


@dataclass
class KeepsState:
    """Adds a per-gateway object in an early hook and finds it again in later ones."""

    seen: list[Counter] = field(default_factory=list)

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Any, settings: Any, gateway: Any
    ) -> None:
        gateway.state.add(Counter()).value += 1

    @hookimpl
    def gateway_register_services(
        self, register: Callable[[Any], None], settings: Any, gateway: Any
    ) -> None:
        counter = gateway.state.get(Counter)
        counter.value += 1
        self.seen.append(counter)


def test_each_gateway_keeps_its_own_plugin_state() -> None:
    plugin = KeepsState()
    first, second = build(plugin), build(plugin)
    assert [counter.value for counter in plugin.seen] == [2, 2]
    assert plugin.seen[0] is not plugin.seen[1]
    assert first.state.get(Counter) is plugin.seen[0]
    assert second.state.get(Counter) is plugin.seen[1]


def test_plugin_state_refuses_a_second_object_and_names_a_missing_one() -> None:
    state = PluginState()
    state.add(Counter())
    with pytest.raises(PluginError, match="already keeps a Counter"):
        state.add(Counter())
    assert state.find(PluginState) is None
    with pytest.raises(PluginError, match="keeps no PluginState"):
        state.get(PluginState)


def test_a_hook_reading_an_unknown_attribute_gets_an_attribute_error() -> None:
    probe = Reads("drivers", "no_such_part")
    with pytest.raises(AttributeError, match="no_such_part"):
        build(probe)
