"""Settings: TOML file plus GATEWAY_<SECTION>_<KEY> overrides, checked with clear errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from gateway.errors import SettingsError, ValidationError
from gateway.settings import (
    Secret,
    Settings,
    SettingsRegistry,
    env_name,
    file_env_name,
    load_settings,
    mask_url_passwords,
    setting,
)

PASSWORD = "hunter2-very-secret"


@dataclass(frozen=True)
class PumpSettings:
    url: str = setting("tcp://localhost:5000", "Where the pump listens")
    password: Secret | None = setting(None, "Pump password", secret=True)
    token: str = setting("", "API token", secret=True)
    retries: int = setting(3, "How often to retry", minimum=0)
    timeout: float = setting(1.5, "Seconds to wait for an answer", minimum=0)
    enabled: bool = setting(True, "Whether the pump is used")
    mode: str = setting("fast", "Pumping mode", choices=("fast", "slow"))
    level: Literal["low", "high"] = setting("low", "Pressure level")
    tags: list[str] = setting(["a"], "Free tags")
    ports: list[int] = setting([], "Ports to open")
    data_dir: Path = setting(Path("/var/lib/pump"), "Data directory")
    limit: int | None = setting(None, "Optional limit")


@dataclass(frozen=True)
class ValveSettings:
    count: int = setting(2, "Number of valves")
    api_key: Secret = setting(Secret(""), "Valve API key")  # Secret type, no secret flag


LoadSettings = Callable[..., Settings]


@pytest.fixture
def registry() -> SettingsRegistry:
    registry = SettingsRegistry()
    registry.register("pump", PumpSettings)
    registry.register("valve", ValveSettings)
    return registry


@pytest.fixture
def load(registry: SettingsRegistry, tmp_path: Path) -> LoadSettings:
    """Load settings from TOML text (or no file) and an environment mapping."""

    def load(toml: str | None = None, **environ: str) -> Settings:
        path = None
        if toml is not None:
            path = tmp_path / "gateway.toml"
            path.write_text(toml)
        return load_settings(registry, path, environ)

    return load


def settings_error(load: LoadSettings, toml: str | None = None, **environ: str) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        load(toml, **environ)
    return caught.value


# -- sources ---------------------------------------------------------------------------------


def test_defaults_apply_without_file_or_environment(load: LoadSettings) -> None:
    settings = load()
    pump = settings.get(PumpSettings)
    assert pump == PumpSettings()
    assert pump.tags == ["a"]
    assert settings.section("valve") == ValveSettings()
    assert settings.sources == {}


def test_list_defaults_are_not_shared_between_instances() -> None:
    assert PumpSettings().tags is not PumpSettings().tags


def test_file_values_are_read_and_their_origin_recorded(load: LoadSettings, tmp_path: Path) -> None:
    settings = load(
        """
        [pump]
        url = "tcp://pump:1"
        retries = 5
        timeout = 2
        enabled = false
        tags = ["x", "y"]
        ports = [1, 2]
        limit = 7

        [valve]
        count = 4
        """
    )
    pump = settings.get(PumpSettings)
    assert pump.url == "tcp://pump:1"
    assert pump.retries == 5
    assert pump.timeout == 2.0
    assert isinstance(pump.timeout, float)
    assert pump.enabled is False
    assert pump.tags == ["x", "y"]
    assert pump.ports == [1, 2]
    assert pump.limit == 7
    assert settings.get(ValveSettings).count == 4
    assert settings.sources["pump.retries"] == f"file {tmp_path / 'gateway.toml'}"
    assert "pump.mode" not in settings.sources


def test_environment_beats_the_file(load: LoadSettings) -> None:
    settings = load(
        '[pump]\nretries = 5\nurl = "tcp://file:1"\n',
        GATEWAY_PUMP_RETRIES="9",
        GATEWAY_VALVE_COUNT="1",
    )
    pump = settings.get(PumpSettings)
    assert pump.retries == 9
    assert pump.url == "tcp://file:1"
    assert settings.get(ValveSettings).count == 1
    assert settings.sources["pump.retries"] == "environment GATEWAY_PUMP_RETRIES"
    assert settings.sources["pump.url"].startswith("file ")
    assert settings.sources["valve.count"] == "environment GATEWAY_VALVE_COUNT"


def test_environment_names() -> None:
    assert env_name("pump", "data_dir") == "GATEWAY_PUMP_DATA_DIR"
    assert env_name("my-plugin", "retry.count") == "GATEWAY_MY_PLUGIN_RETRY_COUNT"


def test_the_process_environment_is_used_by_default(
    registry: SettingsRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_PUMP_MODE", "slow")
    assert load_settings(registry).get(PumpSettings).mode == "slow"


# -- parsing environment text ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        (" On ", True),
        ("false", False),
        ("0", False),
        ("No", False),
        ("off", False),
    ],
)
def test_booleans_from_environment_text(load: LoadSettings, text: str, expected: bool) -> None:
    assert load(GATEWAY_PUMP_ENABLED=text).get(PumpSettings).enabled is expected


@pytest.mark.parametrize(("text", "expected"), [("0", 0), (" 42 ", 42), ("-3", -3)])
def test_integers_from_environment_text(load: LoadSettings, text: str, expected: int) -> None:
    assert load(GATEWAY_VALVE_COUNT=text).get(ValveSettings).count == expected


@pytest.mark.parametrize(("text", "expected"), [("2", 2.0), ("0.25", 0.25), ("1e3", 1000.0)])
def test_floats_from_environment_text(load: LoadSettings, text: str, expected: float) -> None:
    assert load(GATEWAY_PUMP_TIMEOUT=text).get(PumpSettings).timeout == expected


def test_lists_from_environment_text(load: LoadSettings) -> None:
    pump = load(GATEWAY_PUMP_TAGS=" x, y ,,z ", GATEWAY_PUMP_PORTS="80, 443").get(PumpSettings)
    assert pump.tags == ["x", "y", "z"]
    assert pump.ports == [80, 443]
    assert load(GATEWAY_PUMP_TAGS="").get(PumpSettings).tags == []


def test_optional_values_from_environment_text(load: LoadSettings) -> None:
    assert load(GATEWAY_PUMP_LIMIT="5").get(PumpSettings).limit == 5
    assert load("[pump]\nlimit = 5\n", GATEWAY_PUMP_LIMIT="").get(PumpSettings).limit is None
    password = load(GATEWAY_PUMP_PASSWORD=PASSWORD).get(PumpSettings).password
    assert isinstance(password, Secret)
    assert password.reveal() == PASSWORD


def test_paths_expand_the_home_directory(
    load: LoadSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load(GATEWAY_PUMP_DATA_DIR="~/pump").get(PumpSettings).data_dir == tmp_path / "pump"
    from_file = load('[pump]\ndata_dir = "~/from-file"\n').get(PumpSettings)
    assert from_file.data_dir == tmp_path / "from-file"
    assert isinstance(from_file.data_dir, Path)


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "text", "element", "expected"),
    [
        ("GATEWAY_PUMP_RETRIES", "three", "pump.retries", "an integer"),
        ("GATEWAY_PUMP_RETRIES", "1.5", "pump.retries", "an integer"),
        ("GATEWAY_PUMP_TIMEOUT", "soon", "pump.timeout", "a number"),
        ("GATEWAY_PUMP_ENABLED", "maybe", "pump.enabled", "true or false"),
        ("GATEWAY_PUMP_PORTS", "80,http", "pump.ports", "an integer"),
        ("GATEWAY_PUMP_LEVEL", "medium", "pump.level", "one of low, high"),
        ("GATEWAY_PUMP_LIMIT", "none", "pump.limit", "an integer"),
    ],
)
def test_a_bad_environment_value_names_key_expectation_and_origin(
    load: LoadSettings, variable: str, text: str, element: str, expected: str
) -> None:
    error = settings_error(load, **{variable: text})
    assert error.element == element
    assert f"expected {expected}" in error.reason
    assert repr(text) in error.reason
    assert f"environment {variable}" in error.reason
    assert str(error).startswith(f"{element}: ")


@pytest.mark.parametrize(
    ("line", "element", "expected"),
    [
        ('retries = "3"', "pump.retries", "an integer"),
        ("retries = 2.0", "pump.retries", "an integer"),
        ("retries = true", "pump.retries", "an integer"),
        ('timeout = "1"', "pump.timeout", "a number"),
        ('enabled = "yes"', "pump.enabled", "true or false"),
        ("enabled = 1", "pump.enabled", "true or false"),
        ("url = 5", "pump.url", "a string"),
        ('tags = "x"', "pump.tags", "a list"),
        ("tags = [1]", "pump.tags", "a string"),
        ("data_dir = 3", "pump.data_dir", "a string"),
    ],
)
def test_a_bad_file_value_names_key_expectation_and_origin(
    load: LoadSettings, tmp_path: Path, line: str, element: str, expected: str
) -> None:
    error = settings_error(load, f"[pump]\n{line}\n")
    assert error.element == element
    assert f"expected {expected}" in error.reason
    assert f"file {tmp_path / 'gateway.toml'}" in error.reason


def test_choices_are_enforced(load: LoadSettings) -> None:
    error = settings_error(load, GATEWAY_PUMP_MODE="medium")
    assert error.element == "pump.mode"
    assert "one of fast, slow" in error.reason
    assert "'medium'" in error.reason
    assert "environment GATEWAY_PUMP_MODE" in error.reason


@pytest.mark.parametrize(
    ("variable", "text", "element"),
    [
        ("GATEWAY_PUMP_RETRIES", "-1", "pump.retries"),
        ("GATEWAY_PUMP_TIMEOUT", "-0.5", "pump.timeout"),
        ("GATEWAY_PUMP_TIMEOUT", "-inf", "pump.timeout"),
        ("GATEWAY_PUMP_TIMEOUT", "nan", "pump.timeout"),
    ],
)
def test_a_value_below_its_minimum_is_rejected(
    load: LoadSettings, variable: str, text: str, element: str
) -> None:
    error = settings_error(load, **{variable: text})
    assert error.element == element
    assert "expected a value >= 0" in error.reason


def test_the_minimum_itself_is_accepted(load: LoadSettings) -> None:
    pump = load(GATEWAY_PUMP_RETRIES="0", GATEWAY_PUMP_TIMEOUT="0").get(PumpSettings)
    assert (pump.retries, pump.timeout) == (0, 0.0)
    assert math.isinf(load(GATEWAY_PUMP_TIMEOUT="inf").get(PumpSettings).timeout)


def test_an_unknown_section_is_rejected(load: LoadSettings) -> None:
    error = settings_error(load, '[pumps]\nurl = "x"\n')
    assert error.element == "[pumps]"
    assert "not a known section" in error.reason
    assert "pump, valve" in error.reason


def test_an_unknown_key_is_rejected(load: LoadSettings) -> None:
    error = settings_error(load, '[pump]\ncolour = "red"\n')
    assert error.element == "pump.colour"
    assert "not a known key" in error.reason
    assert "retries" in error.reason


def test_a_section_must_be_a_table(load: LoadSettings) -> None:
    error = settings_error(load, "pump = 3\n")
    assert error.element == "[pump]"


def test_a_missing_or_broken_file_is_reported(
    registry: SettingsRegistry, load: LoadSettings, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(SettingsError) as caught:
        load_settings(registry, missing, {})
    assert caught.value.element == str(missing)
    assert "not found" in caught.value.reason
    error = settings_error(load, "[pump\nretries = 3\n")
    assert error.element.endswith("gateway.toml")
    assert "not valid TOML" in error.reason


def test_settings_errors_are_validation_errors() -> None:
    assert issubclass(SettingsError, ValidationError)


# -- secrets ---------------------------------------------------------------------------------


def test_secrets_are_masked_everywhere(load: LoadSettings) -> None:
    settings = load(
        f'[pump]\npassword = "{PASSWORD}"\n',
        GATEWAY_PUMP_TOKEN=PASSWORD,
        GATEWAY_VALVE_API_KEY=PASSWORD,
    )
    pump = settings.get(PumpSettings)
    assert pump.password is not None
    assert pump.password.reveal() == PASSWORD
    assert pump.token == PASSWORD
    assert settings.get(ValveSettings).api_key.reveal() == PASSWORD
    masked = settings.masked()
    assert masked["pump"]["password"] == "********"
    assert masked["pump"]["token"] == "********"
    assert masked["valve"]["api_key"] == "********"
    assert masked["pump"]["url"] == "tcp://localhost:5000"
    assert masked["pump"]["data_dir"] == "/var/lib/pump"
    assert PASSWORD not in repr(masked)
    assert PASSWORD not in repr(pump.password)
    assert PASSWORD not in str(pump.password)


def test_an_unset_secret_is_shown_as_unset(load: LoadSettings) -> None:
    masked = load().masked()
    assert masked["pump"]["password"] is None
    assert masked["pump"]["token"] == ""


@pytest.mark.parametrize(
    ("toml", "element"),
    [
        ("[pump]\npassword = 20240101\n", "pump.password"),
        ("[pump]\ntoken = 20240101\n", "pump.token"),
        ("[valve]\napi_key = 20240101\n", "valve.api_key"),
    ],
)
def test_a_bad_secret_value_is_not_shown_in_the_error(
    load: LoadSettings, toml: str, element: str
) -> None:
    error = settings_error(load, toml)
    assert error.element == element
    assert "20240101" not in str(error)
    assert "********" in error.reason
    assert "expected a string" in error.reason


# -- registry --------------------------------------------------------------------------------


def test_a_section_must_be_a_dataclass() -> None:
    class NotADataclass:
        pass

    with pytest.raises(TypeError):
        SettingsRegistry().register("x", NotADataclass)


def test_two_plugins_cannot_declare_the_same_section() -> None:
    registry = SettingsRegistry()
    registry.register("pump", PumpSettings)
    registry.register("pump", PumpSettings)  # the same declaration twice is harmless
    with pytest.raises(SettingsError) as caught:
        registry.register("pump", ValveSettings)
    assert caught.value.element == "[pump]"


def test_describe_lists_every_key_with_help_default_and_variable(
    registry: SettingsRegistry,
) -> None:
    infos = {(info.section, info.key): info for info in registry.describe()}
    assert len(infos) == 14
    password = infos[("pump", "password")]
    assert password.secret is True
    assert password.help == "Pump password"
    assert password.env_name == "GATEWAY_PUMP_PASSWORD"
    assert infos[("pump", "tags")].default == ["a"]
    assert infos[("pump", "retries")].type is int
    assert infos[("pump", "url")].secret is False


def test_get_refuses_an_undeclared_model(load: LoadSettings) -> None:
    @dataclass(frozen=True)
    class Other:
        x: int = setting(1, "x")

    with pytest.raises(KeyError):
        load().get(Other)


def test_values_and_settings_sections_are_immutable(load: LoadSettings) -> None:
    pump = load().get(PumpSettings)
    with pytest.raises(AttributeError):
        pump.retries = 1  # type: ignore[misc]


def test_every_kind_of_value_can_be_set_from_the_environment(
    load: LoadSettings,
) -> None:
    values: dict[str, Any] = {
        "GATEWAY_PUMP_URL": "tcp://a:1",
        "GATEWAY_PUMP_RETRIES": "7",
        "GATEWAY_PUMP_TIMEOUT": "0.5",
        "GATEWAY_PUMP_ENABLED": "off",
        "GATEWAY_PUMP_MODE": "slow",
        "GATEWAY_PUMP_LEVEL": "high",
        "GATEWAY_PUMP_TAGS": "p,q",
        "GATEWAY_PUMP_PORTS": "1",
        "GATEWAY_PUMP_DATA_DIR": "/srv/pump",
        "GATEWAY_PUMP_LIMIT": "10",
    }
    pump = load(**values).get(PumpSettings)
    assert pump == PumpSettings(
        url="tcp://a:1",
        retries=7,
        timeout=0.5,
        enabled=False,
        mode="slow",
        level="high",
        tags=["p", "q"],
        ports=[1],
        data_dir=Path("/srv/pump"),
        limit=10,
    )


# -- values from files (GATEWAY_<SECTION>_<KEY>_FILE) ----------------------------------------


def write_secret(tmp_path: Path, text: str, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_text(text, newline="")
    return str(path)


def test_file_env_names() -> None:
    assert file_env_name("mqtt", "password") == "GATEWAY_MQTT_PASSWORD_FILE"
    assert file_env_name("my-plugin", "api.key") == "GATEWAY_MY_PLUGIN_API_KEY_FILE"


def test_a_value_is_read_from_the_file_named_by_the_file_variable(
    load: LoadSettings, tmp_path: Path
) -> None:
    secret = write_secret(tmp_path, PASSWORD + "\n")
    settings = load(GATEWAY_PUMP_PASSWORD_FILE=secret)
    password = settings.get(PumpSettings).password
    assert password is not None
    assert password.reveal() == PASSWORD  # the trailing newline is not part of it
    assert settings.sources["pump.password"] == (
        f"file {secret} named by GATEWAY_PUMP_PASSWORD_FILE"
    )
    assert settings.masked()["pump"]["password"] == "********"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("s3cret", "s3cret"),
        ("s3cret\n", "s3cret"),
        ("s3cret\r\n", "s3cret"),
        ("s3cret\n\n", "s3cret\n"),  # one newline only: the rest is the value's
        (" s3cret \n", " s3cret "),  # spaces are kept
        ("\n", ""),
    ],
)
def test_only_one_trailing_newline_is_stripped(
    load: LoadSettings, tmp_path: Path, content: str, expected: str
) -> None:
    token = load(GATEWAY_PUMP_TOKEN_FILE=write_secret(tmp_path, content)).get(PumpSettings).token
    assert token == expected


def test_any_key_can_come_from_a_file_and_is_parsed_like_environment_text(
    load: LoadSettings, tmp_path: Path
) -> None:
    pump = load(
        GATEWAY_PUMP_RETRIES_FILE=write_secret(tmp_path, "7\n", "retries"),
        GATEWAY_PUMP_ENABLED_FILE=write_secret(tmp_path, "off\n", "enabled"),
        GATEWAY_PUMP_TAGS_FILE=write_secret(tmp_path, "x, y\n", "tags"),
        GATEWAY_PUMP_LIMIT_FILE=write_secret(tmp_path, "", "limit"),
    ).get(PumpSettings)
    assert (pump.retries, pump.enabled, pump.tags, pump.limit) == (7, False, ["x", "y"], None)


def test_environment_beats_file_beats_toml(load: LoadSettings, tmp_path: Path) -> None:
    toml = '[pump]\ntoken = "from-toml"\nurl = "tcp://toml:1"\nmode = "slow"\n'
    token_file = write_secret(tmp_path, "from-file\n", "token")
    url_file = write_secret(tmp_path, "tcp://file:1\n", "url")
    settings = load(
        toml,
        GATEWAY_PUMP_TOKEN="from-env",
        GATEWAY_PUMP_TOKEN_FILE=token_file,
        GATEWAY_PUMP_URL_FILE=url_file,
    )
    pump = settings.get(PumpSettings)
    assert pump.token == "from-env"
    assert pump.url == "tcp://file:1"
    assert pump.mode == "slow"
    assert settings.sources["pump.token"] == "environment GATEWAY_PUMP_TOKEN"
    assert settings.sources["pump.url"] == f"file {url_file} named by GATEWAY_PUMP_URL_FILE"
    assert settings.sources["pump.mode"].startswith("file ")
    assert settings.sources["pump.mode"].endswith("gateway.toml")


def test_an_empty_file_variable_is_ignored(load: LoadSettings) -> None:
    settings = load('[pump]\nurl = "tcp://toml:1"\n', GATEWAY_PUMP_URL_FILE="")
    assert settings.get(PumpSettings).url == "tcp://toml:1"


def test_a_missing_file_names_the_key_the_variable_and_the_path(
    load: LoadSettings, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "password"
    error = settings_error(load, GATEWAY_PUMP_PASSWORD_FILE=str(missing))
    assert error.element == "pump.password"
    assert "GATEWAY_PUMP_PASSWORD_FILE" in error.reason
    assert str(missing) in error.reason
    assert "No such file" in error.reason


def test_a_directory_or_binary_file_is_refused_without_showing_content(
    load: LoadSettings, tmp_path: Path
) -> None:
    error = settings_error(load, GATEWAY_PUMP_TOKEN_FILE=str(tmp_path))
    assert error.element == "pump.token"
    assert "cannot read" in error.reason
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xffhunter2\xfe")
    error = settings_error(load, GATEWAY_PUMP_TOKEN_FILE=str(binary))
    assert error.element == "pump.token"
    assert "not UTF-8" in error.reason
    assert "hunter2" not in str(error)
    assert "xff" not in str(error)


@pytest.mark.parametrize(
    ("variable", "content", "element"),
    [
        ("GATEWAY_PUMP_RETRIES_FILE", f"{PASSWORD}\n", "pump.retries"),  # not an integer
        ("GATEWAY_PUMP_MODE_FILE", f"{PASSWORD}\n", "pump.mode"),  # not a choice
        ("GATEWAY_PUMP_TIMEOUT_FILE", "-20240101\n", "pump.timeout"),  # below the minimum
    ],
)
def test_a_bad_value_from_a_file_is_not_shown_in_the_error(
    load: LoadSettings, tmp_path: Path, variable: str, content: str, element: str
) -> None:
    error = settings_error(load, **{variable: write_secret(tmp_path, content)})
    assert error.element == element
    assert "expected" in error.reason
    assert "********" in error.reason
    assert f"named by {variable}" in error.reason
    assert PASSWORD not in str(error)
    assert "20240101" not in str(error)


def test_a_bad_secret_in_a_choice_is_not_shown(registry: SettingsRegistry) -> None:
    @dataclass(frozen=True)
    class Locked:
        code: str = setting("a", "Unlock code", secret=True, choices=("a", "b"))

    registry.register("lock", Locked)
    with pytest.raises(SettingsError) as caught:
        load_settings(registry, None, {"GATEWAY_LOCK_CODE": PASSWORD})
    assert PASSWORD not in str(caught.value)
    assert "one of a, b" in caught.value.reason


def test_a_key_named_like_another_keys_file_variable_keeps_its_own_variable(
    tmp_path: Path,
) -> None:
    """``tls_ca`` and ``tls_ca_file``: GATEWAY_TLS_TLS_CA_FILE sets ``tls_ca_file``."""

    @dataclass(frozen=True)
    class Tls:
        tls_ca: str = setting("", "CA in PEM text")
        tls_ca_file: str = setting("", "CA bundle path")

    registry = SettingsRegistry()
    registry.register("tls", Tls)
    settings = load_settings(registry, None, {"GATEWAY_TLS_TLS_CA_FILE": "/etc/ca.pem"})
    assert settings.get(Tls) == Tls(tls_ca="", tls_ca_file="/etc/ca.pem")


def test_a_secret_from_a_file_stays_masked_in_config_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.cli import main

    secret = write_secret(tmp_path, PASSWORD + "\n")
    monkeypatch.setenv("GATEWAY_MQTT_PASSWORD_FILE", secret)
    monkeypatch.setenv("GATEWAY_REDIS_PASSWORD_FILE", secret)
    assert main(["config", "show"]) == 0
    shown = capsys.readouterr().out
    assert PASSWORD not in shown
    assert f"from file {secret} named by GATEWAY_MQTT_PASSWORD_FILE" in shown
    assert f"from file {secret} named by GATEWAY_REDIS_PASSWORD_FILE" in shown


def test_values_read_from_files_are_masked_like_secrets(load: LoadSettings, tmp_path: Path) -> None:
    """A key that is not secret by declaration (a URL with credentials, say) but comes from a
    secret file is not shown either."""
    url_file = write_secret(tmp_path, f"tcp://pump:{PASSWORD}@host:1\n", "url")
    empty_file = write_secret(tmp_path, "\n", "tags")
    settings = load(GATEWAY_PUMP_URL_FILE=url_file, GATEWAY_PUMP_TAGS_FILE=empty_file)
    assert settings.get(PumpSettings).url == f"tcp://pump:{PASSWORD}@host:1"
    assert settings.hidden == {"pump.url", "pump.tags"}
    masked = settings.masked()
    assert masked["pump"]["url"] == "********"
    assert masked["pump"]["tags"] == []  # nothing to hide
    assert PASSWORD not in repr(masked)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"mqtt://user:{PASSWORD}@broker:1883", "mqtt://user:********@broker:1883"),
        (f"rediss://:{PASSWORD}@redis:6380/0", "rediss://:********@redis:6380/0"),
        ("mqtt://user@broker:1883", "mqtt://user@broker:1883"),
        ("mqtt://broker:1883", "mqtt://broker:1883"),
        (
            f"a=tcp://u:{PASSWORD}@h:1, b=tcp://v:w@h:2",
            "a=tcp://u:********@h:1, b=tcp://v:********@h:2",
        ),
        ("not a url: x:y@z", "not a url: x:y@z"),
    ],
)
def test_url_passwords_are_masked(text: str, expected: str) -> None:
    assert mask_url_passwords(text) == expected


def test_url_passwords_are_masked_in_config_show_and_errors(load: LoadSettings) -> None:
    url = f"tcp://pump:{PASSWORD}@host:1"
    masked = load(GATEWAY_PUMP_URL=url, GATEWAY_PUMP_TAGS=f"{url},plain").masked()
    assert masked["pump"]["url"] == "tcp://pump:********@host:1"
    assert masked["pump"]["tags"] == ["tcp://pump:********@host:1", "plain"]
    error = settings_error(load, f'[pump]\nurl = "{url}"\nmode = "{url}"\n')
    assert error.element == "pump.mode"
    assert PASSWORD not in str(error)
    assert "tcp://pump:********@host:1" in error.reason


# -- unknown variables -----------------------------------------------------------------------


def test_an_unknown_variable_is_refused_with_the_likely_one(load: LoadSettings) -> None:
    error = settings_error(load, GATEWAY_PUMP_RETRYS="3")
    assert str(error).startswith(
        "GATEWAY_PUMP_RETRYS: is not a known setting in the environment; "
        "did you mean GATEWAY_PUMP_RETRIES?"
    )
    assert "did you mean" not in str(settings_error(load, GATEWAY_XYZZY="1"))


def test_host_variables_file_forms_and_other_prefixes_are_not_settings_typos(
    load: LoadSettings, tmp_path: Path
) -> None:
    secret = tmp_path / "key"
    secret.write_text("k\n")
    settings = load(
        GATEWAY_PLUGINS_BLOCK="sfc",
        GATEWAY_TEST_REDIS_URL="redis://x",
        GATEWAY_VALVE_API_KEY_FILE=str(secret),
        GATEWAYS_ARE_OTHER_THINGS="1",
        PATH="/bin",
    )
    assert settings.get(ValveSettings).api_key.reveal() == "k"


def test_variables_of_plugins_left_out_are_tolerated(registry: SettingsRegistry) -> None:
    """One environment for every role: a variable of a blocked plugin's section sets nothing
    here, and is no typo."""
    environ = {"GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": "*", "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "1"}
    load_settings(registry, None, environ, unloaded={"mqtt-equipment", "runtime"})
    with pytest.raises(SettingsError, match="GATEWAY_RUNTIME_TIMER_POLL_SECONDS"):
        load_settings(registry, None, environ, unloaded={"mqtt-equipment"})
