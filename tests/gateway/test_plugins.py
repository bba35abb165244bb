"""Building the plugin manager: block and allow lists, validation, duplicates, description."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

from gateway import __version__
from gateway.errors import PluginError
from gateway.hookspecs import ENTRY_POINT_GROUP, hookimpl
from gateway.plugins import DEFAULT_PLUGINS, GatewayPluginManager, build_plugin_manager
from gateway.testing import WITHOUT_DEFAULT_PLUGINS

# The default plugins other than core are blocked so these tests only exercise the host.
WITHOUT_DEFAULTS = {"GATEWAY_PLUGINS_BLOCK": WITHOUT_DEFAULT_PLUGINS}


class GreeterPlugin:
    """A plugin object implementing two hooks."""

    @hookimpl
    def gateway_add_settings(self, register: Callable[[str, type[Any]], None]) -> None:
        pass

    @hookimpl
    def gateway_startup(self, gateway: Any) -> None:
        pass


class UnknownHookPlugin:
    @hookimpl
    def gateway_make_coffee(self, strength: int) -> None:
        pass


class WrongArgumentsPlugin:
    @hookimpl
    def gateway_add_settings(self, registry: Any) -> None:
        pass


def names(manager: GatewayPluginManager) -> set[str]:
    return {info.name for info in manager.describe()}


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Install a distribution with entry points on ``sys.path`` (only for this test)."""
    installed: list[str] = []

    def install(dist: str, version: str, plugins: dict[str, str], modules: dict[str, str]) -> None:
        info = tmp_path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = [f"[{ENTRY_POINT_GROUP}]"] + [f"{n} = {m}" for n, m in plugins.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for module, source in modules.items():
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
            installed.append(module)
        monkeypatch.syspath_prepend(str(tmp_path))

    yield install
    for module in installed:
        sys.modules.pop(module, None)


GREETER_MODULE = """
    from gateway.hookspecs import hookimpl

    @hookimpl
    def gateway_register_commands(register):
        pass
"""


def test_default_plugins_are_declared_with_core_first() -> None:
    assert DEFAULT_PLUGINS[0] == ("core", "gateway.core")
    assert {name for name, _ in DEFAULT_PLUGINS} >= {"core", "redis", "mqtt"}


def test_block_list_keeps_blocked_plugins_out() -> None:
    manager = build_plugin_manager(WITHOUT_DEFAULTS)
    assert "core" in names(manager)
    assert "redis" not in names(manager)
    assert "mqtt" not in names(manager)


def test_block_list_tolerates_spaces_and_empty_items() -> None:
    manager = build_plugin_manager({"GATEWAY_PLUGINS_BLOCK": " redis , ,mqtt ,"})
    assert not {"redis", "mqtt"} & names(manager)


def test_core_cannot_be_blocked() -> None:
    manager = build_plugin_manager({"GATEWAY_PLUGINS_BLOCK": "core," + WITHOUT_DEFAULT_PLUGINS})
    assert "core" in names(manager)


def test_allow_list_loads_only_what_it_names_and_core() -> None:
    assert names(build_plugin_manager({"GATEWAY_PLUGINS_ALLOW": "none-such"})) == {"core"}
    assert names(build_plugin_manager({"GATEWAY_PLUGINS_ALLOW": "core"})) == {"core"}


def test_extra_plugins_are_registered_after_the_others() -> None:
    manager = build_plugin_manager(
        {"GATEWAY_PLUGINS_ALLOW": "none-such"}, extra_plugins={"greeter": GreeterPlugin()}
    )
    assert names(manager) == {"core", "greeter"}


def test_an_unknown_hook_is_rejected() -> None:
    with pytest.raises(pluggy.PluginValidationError) as caught:
        build_plugin_manager(WITHOUT_DEFAULTS, extra_plugins={"odd": UnknownHookPlugin()})
    assert "gateway_make_coffee" in str(caught.value)


def test_a_hook_with_wrong_arguments_is_rejected() -> None:
    with pytest.raises(pluggy.PluginValidationError):
        build_plugin_manager(WITHOUT_DEFAULTS, extra_plugins={"wrong": WrongArgumentsPlugin()})


def test_check_pending_rejects_an_unknown_hook_registered_directly() -> None:
    manager = build_plugin_manager(WITHOUT_DEFAULTS)
    manager.register_named(UnknownHookPlugin(), "odd", origin="test", version="0")
    with pytest.raises(pluggy.PluginValidationError):
        manager.check_pending()


def test_two_plugins_with_one_name_are_rejected() -> None:
    with pytest.raises(PluginError) as caught:
        build_plugin_manager(WITHOUT_DEFAULTS, extra_plugins={"core": GreeterPlugin()})
    assert "'core'" in str(caught.value)
    manager = GatewayPluginManager()
    manager.register_named(GreeterPlugin(), "greeter", origin="test", version="1")
    with pytest.raises(PluginError):
        manager.register_named(GreeterPlugin(), "greeter", origin="test", version="2")


def test_describe_lists_name_version_origin_and_hooks() -> None:
    manager = build_plugin_manager(
        {"GATEWAY_PLUGINS_ALLOW": "none-such"}, extra_plugins={"greeter": GreeterPlugin()}
    )
    infos = manager.describe()
    assert [info.name for info in infos] == ["core", "greeter"]
    core, greeter = infos
    assert (core.version, core.origin, core.hooks) == (
        __version__,
        "default",
        ("gateway_add_settings",),
    )
    assert greeter.origin == "extra"
    assert greeter.hooks == ("gateway_add_settings", "gateway_startup")


def test_describe_names_the_distribution_of_an_entry_point_plugin(
    third_party: Callable[..., None],
) -> None:
    third_party(
        "acme-greeter", "4.5.6", {"greeter": "acme_greeter"}, {"acme_greeter": GREETER_MODULE}
    )
    manager = build_plugin_manager(WITHOUT_DEFAULTS)
    greeter = next(info for info in manager.describe() if info.name == "greeter")
    assert greeter.version == "4.5.6"
    assert greeter.origin == "acme-greeter"
    assert greeter.hooks == ("gateway_register_commands",)


def test_entry_point_plugins_obey_block_and_allow_lists(third_party: Callable[..., None]) -> None:
    third_party(
        "acme-greeter", "1.0", {"greeter": "acme_greeter"}, {"acme_greeter": GREETER_MODULE}
    )
    blocked = build_plugin_manager({"GATEWAY_PLUGINS_BLOCK": WITHOUT_DEFAULT_PLUGINS + ",greeter"})
    assert "greeter" not in names(blocked)
    allowed = build_plugin_manager({"GATEWAY_PLUGINS_ALLOW": "greeter"})
    assert names(allowed) == {"core", "greeter"}


def test_an_entry_point_that_fails_to_import_is_a_plugin_error(
    third_party: Callable[..., None],
) -> None:
    third_party(
        "acme-broken",
        "1.0",
        {"broken": "acme_broken"},
        {"acme_broken": "raise ImportError('nope')"},
    )
    with pytest.raises(PluginError) as caught:
        build_plugin_manager(WITHOUT_DEFAULTS)
    assert "'broken'" in str(caught.value)
    assert "nope" in str(caught.value)
    # Blocking the broken plugin lets the gateway start without it.
    assert "broken" not in names(
        build_plugin_manager({"GATEWAY_PLUGINS_BLOCK": WITHOUT_DEFAULT_PLUGINS + ",broken"})
    )


def test_an_entry_point_cannot_take_a_default_plugin_name(third_party: Callable[..., None]) -> None:
    third_party("acme-core", "1.0", {"core": "acme_greeter"}, {"acme_greeter": GREETER_MODULE})
    with pytest.raises(PluginError):
        build_plugin_manager(WITHOUT_DEFAULTS)
