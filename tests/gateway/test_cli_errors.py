"""Mistakes a newcomer makes, through the ``gateway`` command as a process: each gets a message
that names the setting, the file or the likely intended word, and never a traceback."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.testing.cli import command_environ, run_gateway


def assert_no_traceback(text: str) -> None:
    assert "Traceback" not in text
    assert "TaskGroup" not in text


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.integration
def test_an_http_port_in_use_stops_start_up_saying_so(
    busy_port: int, redis_url: str, unique: str, tmp_path: Path
) -> None:
    environ = command_environ(
        GATEWAY_HTTP_PORT=str(busy_port),
        GATEWAY_REDIS_URL=redis_url,
        GATEWAY_REDIS_KEY_PREFIX=unique,
        GATEWAY_MQTT_URL=f"memory://{unique}",
        GATEWAY_GATEWAY_DATA_DIR=str(tmp_path),
    )
    done = run_gateway("run", environ=environ)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gateway: gateway stopped: start-up failed: service http")
    assert f"http.port: cannot listen on 127.0.0.1:{busy_port}" in last
    assert "in use" in last
    assert_no_traceback(done.stderr)


BAD_VALUES = [
    ("GATEWAY_HTTP_PORT", "99999", "http.port: expected a value <= 65535, got 99999"),
    ("GATEWAY_MSGPACK_RPC_PORT", "-1", "msgpack_rpc.port: expected a value >= 0"),
    (
        "GATEWAY_MQTT_URL",
        "tcp://x:1",
        "mqtt.url: expected a URL starting mqtt:// or mqtts:// or memory://, got 'tcp://x:1'",
    ),
    ("GATEWAY_MQTT_URL", "mqtt://broker:99999", "mqtt.url: expected a port from 1 to 65535"),
    ("GATEWAY_REDIS_URL", "http://db:6379", "redis.url: expected a URL starting redis://"),
]


def test_a_bad_value_is_caught_when_the_settings_are_checked() -> None:
    variable, value, message = BAD_VALUES[0]
    done = run_gateway("config", "show", environ=command_environ(**{variable: value}))
    assert done.returncode == 2
    assert done.stderr == f"gateway: {message} (from environment {variable})\n"


@pytest.mark.parametrize(("variable", "value", "message"), BAD_VALUES)
def test_bad_values_name_the_key_and_what_was_expected(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    message: str,
) -> None:
    """The same check for every kind of value, through the entry point in this process."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(variable, value)
    assert main(["config", "show"]) == 2
    assert capsys.readouterr().err.startswith(f"gateway: {message}")


def test_an_unknown_role_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    environ = command_environ(
        GATEWAY_MQTT_URL="memory://roles", GATEWAY_GATEWAY_DATA_DIR=str(tmp_path)
    )
    done = run_gateway("run", "--role", "bogus", environ=environ)
    assert done.returncode == 2
    assert "gateway.role: unknown role 'bogus'" in done.stderr
    assert "know: all, engine, gateway, jobs, publisher" in done.stderr
    assert_no_traceback(done.stderr)


def test_run_help_lists_the_roles() -> None:
    done = run_gateway("run", "--help")
    assert done.returncode == 0
    assert "all (default), gateway, jobs, engine, publisher, simulator" in " ".join(
        done.stdout.split()
    )


def test_unknown_keys_name_the_file_and_the_likely_key(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[mqtt]\nurll = 'mqtt://b:1883'\n")
    done = run_gateway("config", "show", "-c", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"gateway: mqtt.urll: is not a known key in {path}; did you mean 'url'? (known: "
    )
    assert_no_traceback(done.stderr)


def test_an_unknown_variable_stops_the_gateway_with_a_suggestion() -> None:
    done = run_gateway("run", environ=command_environ(GATEWAY_MQTT_URLL="mqtt://b:1883"))
    assert done.returncode == 2
    assert done.stderr.startswith(
        "gateway: GATEWAY_MQTT_URLL: is not a known setting in the environment; did you mean "
        "GATEWAY_MQTT_URL?"
    )
    assert_no_traceback(done.stderr)


def test_unknown_sections_name_the_likely_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[mqqt]\nurl = 'mqtt://b:1883'\n")
    assert main(["config", "show", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gateway: [mqqt]: is not a known section in {path}; did you mean")
    assert "'mqtt'?" in err


@pytest.mark.parametrize("args", [("config", "show"), ("plugins", "--json")])
def test_a_reader_that_stops_early_is_no_error(args: tuple[str, ...]) -> None:
    """``gateway config show | head -1``: the pipe closes before the output is written."""
    reader, writer = os.pipe()
    os.close(reader)  # every write fails with EPIPE, as after ``head`` has exited
    try:
        done = run_gateway(*args, stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode == 141  # as the shell reports a process ended by SIGPIPE
    assert done.stderr == ""
