"""Log set-up: readable text by default, one JSON object per line with ``log_format = "json"``."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from gateway.core import CoreSettings
from gateway.settings import Settings

# Attributes a log call may pass in ``extra=`` that JSON lines carry as their own fields.
CONTEXT_FIELDS = ("scope", "job", "correlationid", "binding", "topic")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(settings: Settings) -> None:
    core = settings.get(CoreSettings)
    handler = logging.StreamHandler(sys.stderr)
    if core.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(core.log_level)
