"""Log set-up: readable text by default, one JSON object per line with ``log_format = "json"``.

Every line logged while a message or a job is being handled carries that context (scope, job,
correlation id): code that handles one wraps the work in ``log_context(...)``, and a filter on
the handler copies the context onto each record. Context variables follow anyio tasks, so a
task started inside the block logs with the same context.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

from gateway.core import CoreSettings
from gateway.resilience import describe
from gateway.settings import Settings

# Fields a line about a message or a job carries, in this order.
CONTEXT_FIELDS = ("scope", "job", "correlationid", "binding", "topic")

# Immutable in use: ``log_context`` always sets a new mapping, never changes one in place.
_context: ContextVar[dict[str, str] | None] = ContextVar("gateway_log_context", default=None)


def _current() -> dict[str, str]:
    return _context.get() or {}


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Add ``fields`` (``None`` values ignored) to every line logged inside the block."""
    added = {name: value for name, value in fields.items() if value}
    token = _context.set({**_current(), **added})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the current ``log_context`` onto each record (``extra=`` values win)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in _current().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class CauseFilter(logging.Filter):
    """Names the causes of an exception group logged as an argument (``"%s", error``).

    A task group's failure reads "unhandled errors in a TaskGroup (1 sub-exception)", which
    tells an operator nothing; every line that logs one (a retry, a skipped entry) says what
    is inside it instead (``ConnectionError: ...``, as ``gateway.resilience.describe``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(
            isinstance(arg, BaseExceptionGroup) for arg in record.args
        ):
            record.args = tuple(
                describe(arg) if isinstance(arg, BaseExceptionGroup) else arg for arg in record.args
            )
        return True


def context_of(record: logging.LogRecord) -> dict[str, str]:
    return {name: str(getattr(record, name)) for name in CONTEXT_FIELDS if hasattr(record, name)}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **context_of(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message [scope=… job=…]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = context_of(record)
        if not context:
            return text
        shown = " ".join(f"{name}={value}" for name, value in context.items())
        first, newline, rest = text.partition("\n")  # keep tracebacks after the context
        return f"{first} [{shown}]{newline}{rest}"


def configure_logging(settings: Settings) -> None:
    core = settings.get(CoreSettings)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if core.log_format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(CauseFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(core.log_level)
