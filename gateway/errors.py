"""Errors the gateway raises on purpose.

Everything that comes from outside (a message, a settings file, a recipe) is checked and, when it
is wrong, rejected with a ``ValidationError`` that names the offending element, so callers can
answer with a precise error instead of a stack trace.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base class of the project's own errors."""


class ValidationError(GatewayError, ValueError):
    """Input that does not follow its contract.

    ``element`` names what is wrong (a CloudEvent attribute, a settings key, a recipe element),
    ``reason`` says what was expected.
    """

    def __init__(self, element: str, reason: str) -> None:
        super().__init__(f"{element}: {reason}")
        self.element = element
        self.reason = reason


class CloudEventError(ValidationError):
    """A CloudEvent (or its wire encoding) that cannot be accepted."""


class SettingsError(ValidationError):
    """A settings value that stops start-up."""


class ConnectionFailed(GatewayError):
    """A server a setting names could not be reached or refused the gateway at start.

    ``setting`` names the key (``redis.url``); the gateway adds where its value came from
    (``from_origin``), so the one line says what to fix and where.
    """

    def __init__(self, setting: str, message: str, origin: str | None = None) -> None:
        super().__init__(f"{message} ({setting} from {origin})" if origin else message)
        self.setting = setting
        self.message = message
        self.origin = origin

    def from_origin(self, origin: str) -> ConnectionFailed:
        return ConnectionFailed(self.setting, self.message, origin)


class NotPermitted(GatewayError):
    """A message its sender may not send: equipment answering a command that was sent to other
    equipment, or speaking for equipment it is not. Answered with the ``not-permitted`` error
    code and never retried."""


class PluginError(GatewayError):
    """A plugin that cannot be loaded or registers something twice."""
