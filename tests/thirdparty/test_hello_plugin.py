"""A third-party plugin distribution, built as a wheel and installed beside the gateway.

``gateway-hello-plugin`` (next to this file) uses only the host's public API. The gateway must
find it through its entry point, list it, run its CLI command with its settings, honour the block
list, and serve its processor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from gateway.app import Gateway
from gateway.cloudevents import MSGPACK, CloudEvent
from gateway.codecs.mqtt import from_mqtt, to_mqtt
from gateway.transport import INVALID_REQUEST, UNKNOWN_TYPE

SOURCE = Path(__file__).parent / "gateway-hello-plugin"
HELLO_TYPE = "com.example.hello.v1"
HELLO_TOPIC = "hello/s1/commands"
# The hello processor serves the default MQTT binding; redis is not needed here.
WITHOUT_STORE = "redis"


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the plugin's wheel once and install it into a directory of its own."""
    work = tmp_path_factory.mktemp("hello-plugin")
    source = work / "src"
    shutil.copytree(SOURCE, source)  # building writes build/ and egg-info next to the sources
    wheels = work / "wheels"
    # No build isolation: the test extras bring setuptools >= 70.1, so nothing is downloaded.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            wheels,
            source,
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = wheels.glob("gateway_hello_plugin-1.2.3-*.whl")
    site = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", site, wheel],
        check=True,
        capture_output=True,
    )
    assert (site / "gateway_hello" / "plugin.py").exists()
    return site


def gateway_command(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the ``gateway`` console script with the plugin's directory on ``PYTHONPATH``."""
    script = Path(sys.executable).with_name("gateway")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli"]
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GATEWAY_")}
    environ.update({"PYTHONPATH": str(site), "GATEWAY_PLUGINS_BLOCK": WITHOUT_STORE, **env})
    return subprocess.run(
        [*command, *args], env=environ, capture_output=True, text=True, timeout=60, check=False
    )


# -- the installed distribution, through the real CLI ----------------------------------------


def test_gateway_plugins_lists_the_plugin_with_version_distribution_and_hooks(
    site_dir: Path,
) -> None:
    result = gateway_command(site_dir, "plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "hello 1.2.3 (gateway-hello-plugin)" in lines
    start = lines.index("hello 1.2.3 (gateway-hello-plugin)")
    hooks = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        hooks.append(line.strip())
    assert hooks == [
        "gateway_add_settings",
        "gateway_register_commands",
        "gateway_register_processors",
    ]
    assert any(line.startswith("core ") for line in lines)
    assert any(line.startswith("mqtt ") for line in lines)


def test_gateway_hello_prints_the_default_greeting(site_dir: Path) -> None:
    result = gateway_command(site_dir, "hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello\n"


def test_gateway_hello_takes_the_greeting_from_the_environment(site_dir: Path) -> None:
    result = gateway_command(site_dir, "hello", GATEWAY_HELLO_GREETING="Hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hi\n"


def test_gateway_hello_takes_the_greeting_from_a_settings_file(
    site_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[hello]\ngreeting = "Servus"\n')
    result = gateway_command(site_dir, "hello", "-c", str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Servus\n"


def test_config_show_includes_the_plugin_section(site_dir: Path) -> None:
    result = gateway_command(site_dir, "config", "show", GATEWAY_HELLO_GREETING="Hi")
    assert result.returncode == 0, result.stderr
    assert "[hello]" in result.stdout
    assert 'greeting = "Hi"' in result.stdout
    assert "GATEWAY_HELLO_GREETING; from environment GATEWAY_HELLO_GREETING" in result.stdout


def test_a_blocked_plugin_is_neither_listed_nor_its_command_available(site_dir: Path) -> None:
    listed = gateway_command(site_dir, "plugins", GATEWAY_PLUGINS_BLOCK=f"{WITHOUT_STORE},hello")
    assert listed.returncode == 0, listed.stderr
    assert "hello" not in listed.stdout
    assert "core " in listed.stdout
    command = gateway_command(site_dir, "hello", GATEWAY_PLUGINS_BLOCK=f"{WITHOUT_STORE},hello")
    assert command.returncode != 0
    assert "invalid choice: 'hello'" in command.stderr


def test_the_plugin_is_absent_without_its_distribution(tmp_path: Path) -> None:
    result = gateway_command(tmp_path, "plugins")
    assert result.returncode == 0, result.stderr
    assert "hello" not in result.stdout


# -- what it registers, in-process -----------------------------------------------------------


@pytest.fixture
def hello_gateway(site_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    """A gateway that found the installed plugin through its entry point."""
    monkeypatch.syspath_prepend(str(site_dir))
    environ = {
        "GATEWAY_PLUGINS_BLOCK": WITHOUT_STORE,
        "GATEWAY_HELLO_GREETING": "Grüß Gott",
        "GATEWAY_GATEWAY_SOURCE": "urn:station-gateway:hello-test",
    }
    gateway = Gateway.from_environment(environ=environ)
    yield gateway
    for name in [name for name in sys.modules if name.startswith("gateway_hello")]:
        del sys.modules[name]


def test_the_gateway_loads_the_plugin_module_from_the_installed_wheel(
    hello_gateway: Gateway, site_dir: Path
) -> None:
    info = next(info for info in hello_gateway.plugins.describe() if info.name == "hello")
    assert (info.version, info.origin) == ("1.2.3", "gateway-hello-plugin")
    module = sys.modules["gateway_hello.plugin"]
    assert Path(module.__file__ or "").is_relative_to(site_dir)
    assert [processor.name for processor in hello_gateway.processors] == ["hello"]
    [processor] = hello_gateway.processors
    assert processor.binding == "mqtt"
    assert [subscription.topic for subscription in processor.subscriptions] == ["hello/+/commands"]


def hello(data: Any, **changes: Any) -> CloudEvent:
    return CloudEvent(
        type=HELLO_TYPE, source="urn:mes", subject="s1", data=data, **changes
    ).validate()


@pytest.mark.anyio
async def test_the_processor_greets_by_name(hello_gateway: Gateway) -> None:
    request = hello({"name": "Ada"}, datacontenttype="application/json", correlationid="c-1")
    [reply] = await hello_gateway.dispatcher.dispatch(request, binding="mqtt", topic=HELLO_TOPIC)
    assert reply.data == {"greeting": "Grüß Gott, Ada"}
    assert reply.type == HELLO_TYPE
    assert reply.source == "urn:station-gateway:hello-test"
    assert reply.correlationid == "c-1"
    assert reply.causationid == request.id
    assert reply.subject == "s1"
    assert reply.errorcode is None


@pytest.mark.anyio
async def test_the_processor_answers_a_command_decoded_from_the_wire(
    hello_gateway: Gateway,
) -> None:
    wire = to_mqtt(
        hello({"name": "Grace"}, datacontenttype=MSGPACK),
        HELLO_TOPIC,
        response_topic="mes/replies",
    )
    assert msgpack.unpackb(wire.payload) == {"name": "Grace"}
    request = from_mqtt(wire)
    [reply] = await hello_gateway.dispatcher.dispatch(request, binding="mqtt", topic=wire.topic)
    answer = from_mqtt(to_mqtt(reply, wire.response_topic or ""))
    assert answer.data == {"greeting": "Grüß Gott, Grace"}
    assert answer.datacontenttype == MSGPACK
    assert answer.correlationid == request.id


@pytest.mark.anyio
async def test_a_malformed_hello_gets_an_invalid_request_reply(hello_gateway: Gateway) -> None:
    request = hello({"nom": "Ada"})
    [reply] = await hello_gateway.dispatcher.dispatch(request, binding="mqtt", topic=HELLO_TOPIC)
    assert reply.errorcode == INVALID_REQUEST
    assert "name" in (reply.errormessage or "")


@pytest.mark.anyio
async def test_other_types_and_topics_are_not_the_plugin_s(hello_gateway: Gateway) -> None:
    other_type = hello({"name": "Ada"}).replace(type="com.example.goodbye.v1")
    [reply] = await hello_gateway.dispatcher.dispatch(other_type, binding="mqtt", topic=HELLO_TOPIC)
    assert reply.errorcode == UNKNOWN_TYPE
    [reply] = await hello_gateway.dispatcher.dispatch(
        hello({"name": "Ada"}), binding="mqtt", topic="hello/s1/events"
    )
    assert reply.errorcode == UNKNOWN_TYPE
