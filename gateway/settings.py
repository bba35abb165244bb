"""Settings: a TOML file plus ``GATEWAY_<SECTION>_<KEY>`` environment overrides.

Each plugin declares its section as a dataclass whose fields carry defaults and help::

    @dataclass(frozen=True)
    class MqttSettings:
        url: str = setting("mqtt://localhost:1883", "Broker URL")
        password: Secret | None = setting(None, "Broker password", secret=True)

and registers it from ``gateway_add_settings(register)`` with ``register("mqtt", MqttSettings)``.
Values are checked field by field; a bad one stops start-up with a ``SettingsError`` naming the
key, what was expected and where the value came from.

Where a value comes from, first match wins:

1. the environment variable ``GATEWAY_<SECTION>_<KEY>``;
2. the file named by ``GATEWAY_<SECTION>_<KEY>_FILE`` (Docker/Compose secrets, Kubernetes Secret
   volumes): its content, less one trailing newline, read as text like an environment value; an
   empty ``..._FILE`` variable is ignored;
3. the key in the TOML file;
4. the default.

Secret values never appear in messages: ``Secret`` masks itself; errors and ``Settings.masked``
(what ``gateway config show`` prints and start-up logs) show ``********`` for secret keys, for any
value read from a ``..._FILE`` file, and for the password in a URL (``mqtt://user:pw@host``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin
from urllib.parse import urlsplit

from gateway.errors import SettingsError

ENV_PREFIX = "GATEWAY_"
PORT_MAXIMUM = 65535
FILE_SUFFIX = "_FILE"  # GATEWAY_<SECTION>_<KEY>_FILE names a file holding the value
MASK = "********"
T = TypeVar("T")
# The password of a URL's user information: scheme://user:password@host
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/\s]*):[^@/\s]*@")


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced by asterisks."""
    return _URL_PASSWORD.sub(lambda found: f"{found['head']}:{MASK}@", text)


@dataclass(frozen=True)
class Secret:
    """A value that is never printed or logged (``repr`` and ``str`` mask it)."""

    value: str

    def reveal(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


def setting(
    default: Any,
    help: str,
    *,
    secret: bool = False,
    choices: tuple[Any, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    schemes: tuple[str, ...] = (),
) -> Any:
    """Declare one settings field: its default, its help text and its checks.

    ``minimum`` / ``maximum`` bound a number (``PORT_MAXIMUM`` for a TCP port); ``schemes``
    makes a string a URL of one of those schemes (``mqtt``, ``memory``...) whose port, when
    given, is a valid port; an empty string passes (it means "not set").
    """
    metadata = {
        "help": help,
        "secret": secret,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "schemes": schemes,
    }
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class SettingInfo:
    """What ``config show`` and error messages know about one key."""

    section: str
    key: str
    type: Any
    default: Any
    help: str
    secret: bool

    @property
    def env_name(self) -> str:
        return env_name(self.section, self.key)

    @property
    def file_env_name(self) -> str:
        """The variable naming a file that holds the value (see the module documentation)."""
        return file_env_name(self.section, self.key)


def env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section}_{key}".upper().replace("-", "_").replace(".", "_")


def file_env_name(section: str, key: str) -> str:
    """The variable naming a file that holds the value of ``section.key``."""
    return env_name(section, key) + FILE_SUFFIX


class SettingsRegistry:
    """The sections plugins declared; duplicates are refused here, in one place."""

    def __init__(self) -> None:
        self._sections: dict[str, type[Any]] = {}

    def register(self, name: str, model: type[Any]) -> None:
        if not dataclasses.is_dataclass(model):
            raise TypeError(f"settings section {name!r} must be a dataclass, got {model!r}")
        if name in self._sections and self._sections[name] is not model:
            raise SettingsError(f"[{name}]", "declared by two plugins")
        self._sections[name] = model

    @property
    def sections(self) -> Mapping[str, type[Any]]:
        return self._sections

    def describe(self) -> Iterator[SettingInfo]:
        for section, model in self._sections.items():
            hints = typing.get_type_hints(model)
            for spec in dataclasses.fields(model):
                default = (
                    spec.default_factory()
                    if spec.default_factory is not dataclasses.MISSING
                    else spec.default
                )
                yield SettingInfo(
                    section=section,
                    key=spec.name,
                    type=hints[spec.name],
                    default=default,
                    help=spec.metadata.get("help", ""),
                    secret=bool(spec.metadata.get("secret")),
                )


class Settings:
    """The effective settings: one dataclass instance per declared section."""

    def __init__(
        self,
        sections: Mapping[str, Any],
        sources: Mapping[str, str],
        hidden: Iterable[str] = (),
    ) -> None:
        self._sections = dict(sections)
        self.sources = dict(sources)  # "section.key" -> where the value came from
        self.hidden = frozenset(hidden)  # "section.key" read from a ..._FILE file: never shown

    def origin(self, element: str) -> str:
        """Where the value of ``section.key`` came from: ``environment GATEWAY_...``, ``file
        ...``, or ``the default``."""
        return self.sources.get(element, "the default")

    def get(self, model: type[T]) -> T:
        """The section declared with ``model`` (typed access for plugins)."""
        for value in self._sections.values():
            if type(value) is model:
                return value
        raise KeyError(f"no settings section declared with {model.__name__}")

    def find(self, model: type[T]) -> T | None:
        """The section declared with ``model``, or ``None`` when its plugin is not loaded (how
        a plugin reads another's settings: through the settings class that plugin exports)."""
        for value in self._sections.values():
            if type(value) is model:
                return value
        return None

    def section(self, name: str) -> Any:
        return self._sections[name]

    def items(self) -> Iterator[tuple[str, Any]]:
        yield from self._sections.items()

    def masked(self) -> dict[str, dict[str, Any]]:
        """Every section as plain values; secrets, values read from files and URL passwords
        replaced by ``********``."""
        return {name: self._plain(name, value) for name, value in self._sections.items()}

    def _plain(self, name: str, section: Any) -> dict[str, Any]:
        plain: dict[str, Any] = {}
        for spec in dataclasses.fields(section):
            value = getattr(section, spec.name)
            secret = isinstance(value, Secret) or spec.metadata.get("secret")
            if (secret or f"{name}.{spec.name}" in self.hidden) and value not in (None, "", []):
                value = MASK
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, str):
                value = mask_url_passwords(value)
            elif isinstance(value, list):
                value = [mask_url_passwords(v) if isinstance(v, str) else v for v in value]
            plain[spec.name] = value
        return plain


def load_settings(
    registry: SettingsRegistry,
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    unloaded: Iterable[str] = (),
) -> Settings:
    """Read the TOML file (if any), apply environment overrides, check every value.

    A ``GATEWAY_*`` variable that sets nothing is refused like an unknown key of the file (a
    typo would otherwise leave the default in force unnoticed), unless it belongs to the
    section of a plugin in ``unloaded`` (left out by ``GATEWAY_PLUGINS_BLOCK`` / ``_ALLOW``).
    """
    environ = os.environ if environ is None else environ
    _check_variables(registry, environ, unloaded)
    file_values = _read_toml(path) if path is not None else {}
    for name in file_values:
        if name not in registry.sections:
            raise SettingsError(
                f"[{name}]",
                f"is not a known section in {path}{_did_you_mean(name, registry.sections)}",
            )
    sections: dict[str, Any] = {}
    sources: dict[str, str] = {}
    hidden: set[str] = set()
    for name, model in registry.sections.items():
        table = file_values.get(name, {})
        if not isinstance(table, dict):
            raise SettingsError(f"[{name}]", "must be a table")
        sections[name] = _build_section(name, model, table, environ, sources, hidden, path)
    return Settings(sections, sources, hidden)


# GATEWAY_* variables that are not settings: which plugins load, the test fixtures' servers.
HOST_VARIABLES = frozenset(
    {
        f"{ENV_PREFIX}PLUGINS_BLOCK",
        f"{ENV_PREFIX}PLUGINS_ALLOW",
        f"{ENV_PREFIX}TEST_REDIS_URL",
        f"{ENV_PREFIX}TEST_MQTT_URL",
        f"{ENV_PREFIX}UI_SCREENSHOT_DIR",  # where the UI's browser tests save their pictures
    }
)


def _check_variables(
    registry: SettingsRegistry, environ: Mapping[str, str], unloaded: Iterable[str]
) -> None:
    """``SettingsError`` for the first ``GATEWAY_*`` variable that names no setting."""
    known = set(HOST_VARIABLES)
    for section, model in registry.sections.items():
        for spec in dataclasses.fields(model):
            known |= {env_name(section, spec.name), file_env_name(section, spec.name)}
    ignored = tuple(env_name(name, "") for name in unloaded)  # GATEWAY_<SECTION>_
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in known:
            continue
        if variable.startswith(ignored):
            continue
        close = difflib.get_close_matches(variable, sorted(known), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SettingsError(
            variable,
            f"is not a known setting in the environment{hint} (variables are "
            f"{ENV_PREFIX}<SECTION>_<KEY>, or ..._FILE naming a file; `gateway config show` "
            "lists every key)",
        )


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` (the closest known name, if one is close) and the known names."""
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{hint} (known: {', '.join(names)})"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise SettingsError(str(path), "settings file not found") from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(str(path), f"is not valid TOML: {error}") from None


def _build_section(
    name: str,
    model: type[Any],
    table: Mapping[str, Any],
    environ: Mapping[str, str],
    sources: dict[str, str],
    hidden: set[str],
    path: Path | None,
) -> Any:
    hints = typing.get_type_hints(model)
    fields = {spec.name: spec for spec in dataclasses.fields(model)}
    for key in table:
        if key not in fields:
            raise SettingsError(
                f"{name}.{key}", f"is not a known key in {path}{_did_you_mean(key, fields)}"
            )
    # A key whose variable with _FILE appended is another key's variable has no _FILE form
    # (e.g. keys ``tls_ca`` and ``tls_ca_file``): that variable sets the other key.
    variables = {env_name(name, key) for key in fields}
    values: dict[str, Any] = {}
    for key, spec in fields.items():
        element = f"{name}.{key}"
        variable = env_name(name, key)
        file_variable = variable + FILE_SUFFIX
        from_file = False  # such values are never shown
        if variable in environ:
            raw, origin, from_text = environ[variable], f"environment {variable}", True
        elif environ.get(file_variable) and file_variable not in variables:
            value_path = Path(environ[file_variable])
            raw = _read_value_file(element, file_variable, value_path)
            origin, from_text, from_file = f"file {value_path} named by {file_variable}", True, True
        elif key in table:
            raw, origin, from_text = table[key], f"file {path}", False
        else:
            continue
        values[key] = _check(element, hints[key], raw, spec.metadata, from_text, origin, from_file)
        sources[element] = origin
        if from_file:
            hidden.add(element)
    try:
        return model(**values)
    except (TypeError, ValueError) as error:
        raise SettingsError(f"[{name}]", mask_url_passwords(str(error))) from None


def _read_value_file(element: str, variable: str, path: Path) -> str:
    """The text of a ``..._FILE`` file, less one trailing newline; errors never show content."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise SettingsError(
            element, f"cannot read {path} (named by {variable}): {reason}"
        ) from None
    except UnicodeDecodeError:
        raise SettingsError(element, f"{path} (named by {variable}) is not UTF-8 text") from None
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    return text


def _check(
    element: str,
    annotation: Any,
    raw: Any,
    metadata: Mapping[str, Any],
    from_text: bool,
    origin: str,
    from_file: bool = False,
) -> Any:
    secret = from_file or metadata.get("secret") or Secret in (annotation, *get_args(annotation))

    def shown(value: Any) -> str:
        return MASK if secret else mask_url_passwords(repr(value))

    try:
        value = _convert(annotation, raw, from_text)
    except (TypeError, ValueError) as error:
        raise SettingsError(
            element, f"expected {error}, got {shown(raw)} (from {origin})"
        ) from None
    choices = metadata.get("choices") or ()
    if choices and value not in choices:
        raise SettingsError(
            element,
            f"expected one of {', '.join(map(str, choices))}, got {shown(value)} (from {origin})",
        )
    minimum = metadata.get("minimum")
    if minimum is not None and value is not None and not value >= minimum:
        raise SettingsError(
            element, f"expected a value >= {minimum}, got {shown(value)} (from {origin})"
        )
    maximum = metadata.get("maximum")
    if maximum is not None and value is not None and not value <= maximum:
        raise SettingsError(
            element, f"expected a value <= {maximum}, got {shown(value)} (from {origin})"
        )
    schemes = metadata.get("schemes") or ()
    if schemes and value:
        problem = url_problem(str(value), schemes)
        if problem:
            raise SettingsError(element, f"{problem}, got {shown(value)} (from {origin})")
    return value


def url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    """Why ``url`` is not a URL of one of ``schemes`` with a valid port; ``None`` if it is."""
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        return "expected a URL starting " + " or ".join(f"{scheme}://" for scheme in schemes)
    # A URL may name several hosts, comma-separated (Redis Sentinel or Cluster seeds): every
    # one of them needs a valid port.
    userinfo, _, hosts = parts.netloc.rpartition("@")
    for host in hosts.split(",") if hosts else [""]:
        netloc = f"{userinfo}@{host}" if userinfo else host
        try:
            parts._replace(netloc=netloc).port  # noqa: B018 - parsing the port is the check
        except ValueError:
            return f"expected a port from 1 to {PORT_MAXIMUM} in the URL"
    return None


_BOOLEAN_WORDS = {"true": True, "1": True, "yes": True, "on": True}
_BOOLEAN_WORDS |= {"false": False, "0": False, "no": False, "off": False}


def _convert(annotation: Any, raw: Any, from_text: bool) -> Any:
    """``raw`` as ``annotation``; ``ValueError(<what was expected>)`` when it does not fit."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        if raw is None or (from_text and raw == ""):
            return None
        return _convert(options[0], raw, from_text)
    if origin is Literal:
        allowed = get_args(annotation)
        if raw not in allowed:
            raise ValueError(f"one of {', '.join(map(str, allowed))}")
        return raw
    if origin is list:
        (item_type,) = get_args(annotation)
        if from_text:
            raw = [part.strip() for part in raw.split(",") if part.strip()]
        if not isinstance(raw, list):
            raise ValueError("a list")
        return [_convert(item_type, item, from_text) for item in raw]
    return _convert_scalar(annotation, raw, from_text)


def _convert_scalar(annotation: Any, raw: Any, from_text: bool) -> Any:
    converters: dict[Any, Callable[[Any, bool], Any]] = {
        bool: _to_bool,
        int: _to_int,
        float: _to_float,
        str: _to_str,
        Path: lambda value, text: Path(_to_str(value, text)).expanduser(),
        Secret: lambda value, text: Secret(_to_str(value, text)),
    }
    if annotation not in converters:
        raise TypeError(f"settings cannot hold {annotation!r}")
    return converters[annotation](raw, from_text)


def _to_bool(raw: Any, from_text: bool) -> bool:
    if isinstance(raw, bool):
        return raw
    if from_text and isinstance(raw, str) and raw.strip().lower() in _BOOLEAN_WORDS:
        return _BOOLEAN_WORDS[raw.strip().lower()]
    raise ValueError("true or false")


def _to_int(raw: Any, from_text: bool) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if from_text and isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            pass
    raise ValueError("an integer")


def _to_float(raw: Any, from_text: bool) -> float:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    if from_text and isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            pass
    raise ValueError("a number")


def _to_str(raw: Any, from_text: bool) -> str:
    if isinstance(raw, str):
        return raw
    raise ValueError("a string")
