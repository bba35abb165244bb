"""MessagePack-RPC messages: their shapes, the error codes, and parsing with precise errors.

- request ``[0, msgid, method, params]``, answered by one response
- response ``[1, msgid, error, result]``; ``error`` is ``nil`` on success, else
  ``{"code": str, "message": str}``
- notification ``[2, method, params]``, never answered

A frame that is not a usable message is answered with an error response when it could be a
request: with its msgid when the msgid can be read, else with msgid ``nil`` (as JSON-RPC does
for parse errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import GatewayError
from gateway.transport import INVALID_REQUEST

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2

# Error codes sent in ``error.code`` (``invalid-request``: the host's code for a bad CloudEvent).
PARSE_ERROR = "parse-error"
INVALID_MESSAGE = "invalid-message"
TOO_LARGE = "request-too-large"
METHOD_NOT_FOUND = "method-not-found"
INVALID_PARAMS = "invalid-params"
INVALID_CLOUDEVENT = INVALID_REQUEST
NOT_IDENTIFIED = "not-identified"
NOT_AUTHORIZED = "not-authorized"  # the device's credential does not prove its equipment id
INTERNAL_ERROR = "internal-error"
REMOTE_ERROR = "remote-error"  # a peer's error that does not follow the {code, message} shape

_MAX_MSGID = 0xFFFFFFFF


class RpcError(GatewayError):
    """An error response: raised by a method to answer one, and by ``call`` on receiving one."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}

    @classmethod
    def from_wire(cls, error: Any) -> RpcError:
        if isinstance(error, dict):
            code, message = error.get("code"), error.get("message")
            if isinstance(code, str) and isinstance(message, str):
                return cls(code, message)
        return cls(REMOTE_ERROR, repr(error)[:1000])


class RpcConnectionClosed(GatewayError):
    """The connection ended before the call was answered, or before a frame could be sent."""


@dataclass(frozen=True)
class Request:
    msgid: int
    method: str
    params: list[Any]


@dataclass(frozen=True)
class Response:
    msgid: int
    error: Any
    result: Any


@dataclass(frozen=True)
class Notification:
    method: str
    params: list[Any]


@dataclass(frozen=True)
class Invalid:
    """A frame that is not a usable message; ``kind`` and ``msgid`` as far as it has them.

    It is answered (with ``msgid``, possibly ``nil``) unless it was a notification or a
    response: the protocol has no place for an answer to those.
    """

    code: str
    message: str
    kind: int | None = None
    msgid: int | None = None

    @property
    def answerable(self) -> bool:
        return self.kind not in (RESPONSE, NOTIFICATION)


Message = Request | Response | Notification | Invalid


def is_msgid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_MSGID


def kind_of(value: Any) -> int | None:
    """The message type of a decoded frame, when it has a valid one."""
    if not isinstance(value, list) or not value:
        return None
    return message_type(value[0])


def message_type(first: Any) -> int | None:
    """``first`` as a message type (0, 1 or 2), or ``None`` if it is not one."""
    if isinstance(first, bool) or first not in (REQUEST, RESPONSE, NOTIFICATION):
        return None
    return int(first)


def parse_message(value: Any) -> Message:
    """The message a decoded frame carries, or ``Invalid`` saying what is wrong with it."""
    kind = kind_of(value)
    if kind is None:
        return _invalid(f"a message is an array starting with 0, 1 or 2; got {_brief(value)}")
    expected = 3 if kind == NOTIFICATION else 4
    msgid = value[1] if kind != NOTIFICATION and len(value) > 1 and is_msgid(value[1]) else None
    if len(value) != expected:
        name = ("request", "response", "notification")[kind]
        return _invalid(f"a {name} has {expected} elements, got {len(value)}", kind, msgid)
    if kind != NOTIFICATION and msgid is None:
        return _invalid(f"msgid must be an integer 0..{_MAX_MSGID}, got {_brief(value[1])}", kind)
    if kind == RESPONSE:
        return Response(value[1], value[2], value[3])
    method, params = value[-2], value[-1]
    if not isinstance(method, str):
        return _invalid(f"method must be a string, got {_brief(method)}", kind, msgid)
    if not isinstance(params, list):
        return _invalid(f"params must be an array, got {_brief(params)}", kind, msgid)
    if kind == NOTIFICATION:
        return Notification(method, params)
    return Request(value[1], method, params)


def _invalid(message: str, kind: int | None = None, msgid: int | None = None) -> Invalid:
    return Invalid(INVALID_MESSAGE, message, kind, msgid)


def _brief(value: Any) -> str:
    """A short description of a wrong value, safe to quote in an error message."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def request(msgid: int, method: str, params: list[Any]) -> list[Any]:
    return [REQUEST, msgid, method, params]


def response(msgid: int | None, error: RpcError | None, result: Any) -> list[Any]:
    return [RESPONSE, msgid, error.to_wire() if error is not None else None, result]


def notification(method: str, params: list[Any]) -> list[Any]:
    return [NOTIFICATION, method, params]


def expect_params(method: str, params: list[Any], *names: str) -> None:
    """Check the number of positional params; the error names what the method takes."""
    if len(params) != len(names):
        wanted = ", ".join(names) or "none"
        raise RpcError(
            INVALID_PARAMS, f"{method} takes {len(names)} params ({wanted}), got {len(params)}"
        )
