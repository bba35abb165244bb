"""The ``gateway`` command in-process: ``config show``, ``plugins`` and error exits."""

from __future__ import annotations

import gc
import json
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from gateway import __version__
from gateway.cli import _StartupHeapFrozen, main
from gateway.hookspecs import ENTRY_POINT_GROUP
from gateway.testing import WITHOUT_DEFAULT_PLUGINS

SECRET = "s3cr3t-vault-password"

VAULT_PLUGIN = '''
    """A third-party plugin with a settings section holding a secret."""
    from dataclasses import dataclass

    from gateway.hookspecs import hookimpl
    from gateway.settings import Secret, setting


    @dataclass(frozen=True)
    class VaultSettings:
        url: str = setting("https://vault.local", "Vault address")
        password: Secret | None = setting(None, "Vault password", secret=True)
        retries: int = setting(3, "Retries", minimum=0)
        tags: list[str] = setting(["edge"], "Tags")


    @hookimpl
    def gateway_add_settings(register):
        register("vault", VaultSettings)
'''

CLASHING_PLUGIN = """
    from gateway.cli import Command
    from gateway.hookspecs import hookimpl


    @hookimpl
    def gateway_register_commands(register):
        register(Command("plugins", "mine", lambda parser: None, lambda args, plugins: 0))
"""


def install_plugin(
    directory: Path, monkeypatch: pytest.MonkeyPatch, name: str, dist: str, source: str
) -> None:
    """Put a distribution ``dist`` with the entry point ``name`` on ``sys.path`` for this test."""
    module = f"{dist.replace('-', '_')}_{uuid.uuid4().hex[:8]}"  # never cached by another test
    info = directory / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {module}\n")
    (directory / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(directory))


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No GATEWAY_* variables from the developer's shell leak into these tests."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def vault(clean_environ: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    install_plugin(tmp_path / "site", clean_environ, "vault", "acme-vault", VAULT_PLUGIN)
    clean_environ.setenv("GATEWAY_PLUGINS_BLOCK", WITHOUT_DEFAULT_PLUGINS)
    return clean_environ


def sections(output: str) -> dict[str, dict[str, tuple[str, str]]]:
    """``config show`` output as section -> key -> (value text, comment line)."""
    parsed: dict[str, dict[str, tuple[str, str]]] = {}
    current: dict[str, tuple[str, str]] = {}
    comment = ""
    for line in output.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = parsed.setdefault(line[1:-1], {})
        elif line.startswith("#"):
            comment = line
        elif " = " in line:
            key, value = line.split(" = ", 1)
            current[key] = (value, comment)
    return parsed


# -- config show -----------------------------------------------------------------------------


def test_config_show_prints_every_section_with_masked_secrets_and_origins(
    vault: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[vault]\nurl = "https://vault.cell-7"\n[gateway]\nrole = "publisher"\n')
    vault.setenv("GATEWAY_VAULT_PASSWORD", SECRET)
    vault.setenv("GATEWAY_VAULT_RETRIES", "5")

    assert main(["config", "show", "-c", str(config)]) == 0

    output = capsys.readouterr().out
    assert SECRET not in output
    shown = sections(output)
    assert set(shown) == {"gateway", "vault"}
    assert set(shown["gateway"]) >= {"instance_id", "role", "data_dir", "log_level"}
    password, password_comment = shown["vault"]["password"]
    assert password == '"********"'
    assert "Vault password" in password_comment
    assert "from environment GATEWAY_VAULT_PASSWORD" in password_comment
    assert shown["vault"]["retries"] == (
        "5",
        "# Retries (GATEWAY_VAULT_RETRIES; from environment GATEWAY_VAULT_RETRIES)",
    )
    url, url_comment = shown["vault"]["url"]
    assert url == '"https://vault.cell-7"'
    assert f"from file {config}" in url_comment
    assert shown["vault"]["tags"][0] == '["edge"]'
    assert "from default" in shown["vault"]["tags"][1]
    assert shown["gateway"]["role"][0] == '"publisher"'
    assert "GATEWAY_GATEWAY_LOG_LEVEL; from default" in shown["gateway"]["log_level"][1]


def test_config_show_keeps_the_files_order_filters_sections_and_prints_json(
    vault: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[vault]\nretries = 4\n[gateway]\nrole = "publisher"\n')
    assert main(["config", "show", "-c", str(config)]) == 0
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert headers == ["[vault]", "[gateway]"]  # as the file has them
    assert main(["config", "show"]) == 0  # no file: the host's section first
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert headers == ["[gateway]", "[vault]"]

    assert main(["config", "show", "vault", "-c", str(config)]) == 0
    assert list(sections(capsys.readouterr().out)) == ["vault"]
    assert main(["config", "show", "vault", "--json", "-c", str(config)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["vault"]
    assert document["vault"]["retries"] == {
        "value": 4,
        "from": f"file {config}",
        "env": "GATEWAY_VAULT_RETRIES",
        "help": "Retries",
    }
    assert document["vault"]["password"]["value"] is None
    assert main(["config", "show", "nope"]) == 2
    assert "no section nope (known: gateway, vault)" in capsys.readouterr().err


def test_config_show_marks_an_unset_secret(
    vault: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "show"]) == 0
    output = capsys.readouterr().out
    # Printed as a comment: pasted back into a file, it must not turn into an empty password.
    assert "# password is unset" in output
    assert "password" not in sections(output)["vault"]


def shown_value(output: str, section: str, key: str) -> str:
    return sections(output)[section][key][0]


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS", "soon", "gateway.shutdown_grace_seconds"),
        ("GATEWAY_GATEWAY_LOG_LEVEL", "LOUD", "gateway.log_level"),
        ("GATEWAY_VAULT_RETRIES", "-2", "vault.retries"),
    ],
)
def test_config_show_with_a_bad_value_exits_non_zero_naming_the_key(
    vault: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    key: str,
) -> None:
    vault.setenv(variable, value)
    assert main(["config", "show"]) != 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"gateway: {key}: expected")
    assert f"environment {variable}" in captured.err
    assert "Traceback" not in captured.err


def test_config_show_never_prints_a_bad_secret(
    vault: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("[vault]\npassword = 123456789\n")
    assert main(["config", "show", "-c", str(config)]) != 0
    captured = capsys.readouterr()
    assert "vault.password" in captured.err
    assert "123456789" not in captured.err + captured.out


@pytest.mark.parametrize(
    ("toml", "element"),
    [("[valve]\nx = 1\n", "[valve]"), ("[vault]\ncolour = 1\n", "vault.colour")],
)
def test_config_show_rejects_unknown_sections_and_keys(
    vault: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    toml: str,
    element: str,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(toml)
    assert main(["config", "show", "-c", str(config)]) != 0
    assert capsys.readouterr().err.startswith(f"gateway: {element}: ")


def test_config_show_reports_a_missing_file(
    vault: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "show", "-c", str(tmp_path / "nope.toml")]) != 0
    assert "settings file not found" in capsys.readouterr().err


def test_run_with_a_bad_value_exits_non_zero_before_starting(
    vault: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vault.setenv("GATEWAY_GATEWAY_LOG_FORMAT", "xml")
    assert main(["run"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("gateway: gateway.log_format: expected one of text, json")
    assert "started" not in err


# -- plugins ---------------------------------------------------------------------------------


def test_plugins_lists_the_default_plugins_with_versions_and_hooks(
    clean_environ: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins"]) == 0
    output = capsys.readouterr().out
    lines = output.splitlines()
    assert f"core {__version__} (default)" in lines
    assert f"redis {__version__} (default)" in lines
    assert f"mqtt {__version__} (default)" in lines
    core = lines.index(f"core {__version__} (default)")
    assert lines[core + 1] == "    gateway_add_settings"
    redis = lines.index(f"redis {__version__} (default)")
    assert "    gateway_make_store" in lines[redis + 1 :]
    mqtt = lines.index(f"mqtt {__version__} (default)")
    assert "    gateway_register_bindings" in lines[mqtt + 1 :]


def test_plugins_honours_the_block_list(
    clean_environ: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_environ.setenv("GATEWAY_PLUGINS_BLOCK", WITHOUT_DEFAULT_PLUGINS)
    assert main(["plugins"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:1] != " "]
    assert names == ["core"]


def test_plugins_as_json(vault: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    infos = {info["name"]: info for info in json.loads(capsys.readouterr().out)}
    assert set(infos) == {"core", "vault"}
    assert infos["vault"] == {
        "name": "vault",
        "version": "1.0",
        "origin": "acme-vault",
        "hooks": ["gateway_add_settings"],
    }


def test_a_plugin_command_clashing_with_a_builtin_is_an_error(
    clean_environ: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugin(tmp_path, clean_environ, "clash", "acme-clash", CLASHING_PLUGIN)
    clean_environ.setenv("GATEWAY_PLUGINS_BLOCK", WITHOUT_DEFAULT_PLUGINS)
    assert main(["plugins"]) != 0
    assert "'plugins'" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"gateway {__version__}"


def test_a_command_is_required(
    clean_environ: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_environ.setenv("GATEWAY_PLUGINS_BLOCK", WITHOUT_DEFAULT_PLUGINS)
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2


def test_once_gateway_run_has_started_the_start_up_heap_is_out_of_the_gcs_reach() -> None:
    assert gc.get_freeze_count() == 0
    try:
        _StartupHeapFrozen().gateway_startup(gateway=None)  # type: ignore[arg-type]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
