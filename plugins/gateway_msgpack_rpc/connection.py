"""One MessagePack-RPC connection. Symmetric: either side serves methods, calls and notifies.

The gateway's server side, its client side and the ``RpcDevice`` all use this class; only the
methods they offer differ. What it guarantees:

- A malformed frame (see ``framing`` and ``protocol``) is answered with an error and reported,
  and the next frame is read as usual; only an oversize frame past the skip budget closes it.
- At most ``max_concurrent_requests`` requests and notifications are handled at once; while
  all slots are busy, nothing more is read, so a flooding peer is slowed down by TCP itself.
- Frames are written whole, one at a time; a peer that takes no frame within
  ``send_timeout_seconds`` is given up, since a half-written frame would corrupt the stream.
- When the connection ends, every call waiting for an answer fails at once with
  ``RpcConnectionClosed``: nobody waits for a peer that is gone.
- ``close`` stops reading; requests being handled still finish and get their answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import msgpack
from anyio.abc import ByteStream, TaskGroup

from gateway_msgpack_rpc.framing import READ_SIZE, FrameReader, Unskippable
from gateway_msgpack_rpc.protocol import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    TOO_LARGE,
    Invalid,
    Notification,
    Request,
    Response,
    RpcConnectionClosed,
    RpcError,
    notification,
    parse_message,
    request,
    response,
)

log = logging.getLogger(__name__)

Method = Callable[[list[Any]], Awaitable[Any]]
"""A method receives the request's params and returns its result (or raises ``RpcError``)."""

ErrorHook = Callable[[str, str], None]
"""Told ``(code, message)`` of every malformed frame and failed request, for logs and metrics."""

_LOST = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass(frozen=True)
class Limits:
    """What one connection accepts from its peer (see ``MsgpackRpcSettings``)."""

    max_request_bytes: int = 1_048_576
    max_skip_bytes: int = 16_777_216
    max_concurrent_requests: int = 16
    send_timeout_seconds: float = 5.0


class PendingCall:
    """A request sent and not yet answered; ``RpcConnection.wait`` gives its result."""

    def __init__(self, msgid: int, method: str) -> None:
        self.msgid = msgid
        self.method = method
        self._done = anyio.Event()
        self._result: Any = None
        self._error: Exception | None = None

    def settle(self, result: Any = None, error: Exception | None = None) -> None:
        if not self._done.is_set():
            self._result, self._error = result, error
            self._done.set()

    async def outcome(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result


class RpcConnection:
    """A peer over ``stream``; ``run`` serves it until it goes or ``close`` is called."""

    def __init__(
        self,
        stream: ByteStream,
        *,
        name: str,
        methods: Mapping[str, Method] | None = None,
        limits: Limits | None = None,
        on_error: ErrorHook | None = None,
    ) -> None:
        self.name = name
        self.methods: dict[str, Method] = dict(methods or {})
        self.close_reason = ""
        self.finished = False  # run() has ended: nothing is read or sent any more
        self.last_received = 0.0  # anyio.current_time() of the last bytes from the peer
        self._stream = stream
        self._limits = limits = limits or Limits()
        self._on_error = on_error or self._log_error
        self._reader = FrameReader(limits.max_request_bytes, limits.max_skip_bytes)
        self._write_lock = anyio.Lock()
        self._slots = anyio.Semaphore(limits.max_concurrent_requests)
        self._reading = anyio.CancelScope()
        self._broken = False  # a write failed or timed out: no more frames may be sent
        self._calls: dict[int, PendingCall] = {}
        self._next_msgid = 0
        self._finished = anyio.Event()

    # -- serving -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Read and serve until the peer disconnects or ``close``; then close the stream."""
        self.last_received = anyio.current_time()
        try:
            async with anyio.create_task_group() as handlers:
                with self._reading:
                    await self._read_loop(handlers)
                # Nothing more is read, so calls waiting for an answer fail now, not once the
                # requests in hand are done.
                self._fail_calls()
        finally:
            self.finished = True
            self._fail_calls()
            try:
                await self._close_stream()
            finally:
                self._finished.set()

    async def wait_finished(self) -> None:
        """Return once ``run`` has ended (the peer went, or ``close`` / ``abort``)."""
        await self._finished.wait()

    def close(self, reason: str) -> None:
        """Stop reading; requests in hand still finish and are answered, then the stream closes."""
        if not self.close_reason:
            self.close_reason = reason
        self._reading.cancel()

    async def abort(self, reason: str) -> None:
        """Drop the connection at once: nothing more is sent, the stream is not closed politely."""
        self._give_up(reason)
        await anyio.aclose_forcefully(self._stream)

    async def _read_loop(self, handlers: TaskGroup) -> None:
        while True:
            try:
                chunk = await self._stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                self.close("peer disconnected")
                return
            except _LOST as error:
                self.close(f"connection lost ({_describe(error)})")
                return
            self.last_received = anyio.current_time()
            for frame in self._reader.feed(chunk):
                if isinstance(frame, Unskippable):
                    self._on_error(TOO_LARGE, f"{frame.message}: connection closed")
                    self.close(frame.message)
                    return
                await self._take(frame, handlers)

    async def _take(self, frame: Any, handlers: TaskGroup) -> None:
        message = frame if isinstance(frame, Invalid) else parse_message(frame)
        if isinstance(message, Response):
            self._settle(message)
        elif isinstance(message, Invalid):
            await self._refuse(message)
        else:
            await self._slots.acquire()  # all slots busy: stop reading until one frees up
            handlers.start_soon(self._serve, message)

    async def _refuse(self, invalid: Invalid) -> None:
        self._on_error(invalid.code, invalid.message)
        if invalid.answerable:
            error = RpcError(invalid.code, invalid.message)
            await self._answer(response(invalid.msgid, error, None))

    async def _serve(self, message: Request | Notification) -> None:
        try:
            error, result = await self._outcome(message)
            if isinstance(message, Request):
                await self._answer(response(message.msgid, error, result))
        finally:
            self._slots.release()

    async def _outcome(self, message: Request | Notification) -> tuple[RpcError | None, Any]:
        try:
            method = self.methods.get(message.method)
            if method is None:
                offered = ", ".join(sorted(self.methods)) or "none"
                raise RpcError(
                    METHOD_NOT_FOUND, f"no method {message.method[:100]!r} (methods: {offered})"
                )
            return None, await method(message.params)
        except RpcError as error:
            self._on_error(error.code, f"{message.method[:100]}: {error.message}")
            return error, None
        except Exception as error:
            log.exception("%s: method %s failed", self.name, message.method[:100])
            return RpcError(INTERNAL_ERROR, f"{type(error).__name__}: {error}"), None

    async def _answer(self, frame: list[Any]) -> None:
        """Send a response; one that cannot be encoded becomes an internal error."""
        try:
            try:
                await self._send(frame)
            except (TypeError, ValueError, OverflowError) as error:
                log.error("%s: result cannot be encoded as MessagePack: %s", self.name, error)
                failure = RpcError(INTERNAL_ERROR, f"result cannot be encoded: {error}")
                await self._send(response(frame[1], failure, None))
        except RpcConnectionClosed:
            log.debug("%s: response to msgid %s not sent: connection closed", self.name, frame[1])

    # -- calling -----------------------------------------------------------------------------

    async def call(self, method: str, *params: Any, timeout: float | None = None) -> Any:
        """Call ``method`` and return its result; ``RpcError`` if the peer answered an error,
        ``RpcConnectionClosed`` if the connection ended first, ``TimeoutError`` after
        ``timeout`` seconds."""
        return await self.wait(await self.start_call(method, *params), timeout)

    async def start_call(self, method: str, *params: Any) -> PendingCall:
        """Send a request without waiting for its answer (``wait`` gets it later)."""
        msgid = self._new_msgid()
        pending = PendingCall(msgid, method)
        self._calls[msgid] = pending
        try:
            await self._send(request(msgid, method, list(params)))
        except BaseException:
            del self._calls[msgid]
            raise
        return pending

    async def wait(self, pending: PendingCall, timeout: float | None = None) -> Any:
        try:
            with anyio.fail_after(timeout):
                return await pending.outcome()
        finally:
            self._calls.pop(pending.msgid, None)

    async def notify(self, method: str, *params: Any) -> None:
        """Send a notification (no answer comes back)."""
        await self._send(notification(method, list(params)))

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are, e.g. deliberately malformed frames in tests."""
        async with self._write_lock:
            await self._write(data)

    def _new_msgid(self) -> int:
        while True:
            self._next_msgid = (self._next_msgid + 1) & 0xFFFFFFFF
            if self._next_msgid not in self._calls:
                return self._next_msgid

    def _settle(self, answer: Response) -> None:
        pending = self._calls.pop(answer.msgid, None)
        if pending is None:
            log.info("%s: response to msgid %d that nobody waits for", self.name, answer.msgid)
        elif answer.error is not None:
            pending.settle(error=RpcError.from_wire(answer.error))
        else:
            pending.settle(result=answer.result)

    def _fail_calls(self) -> None:
        calls, self._calls = self._calls, {}
        for pending in calls.values():
            pending.settle(error=self._closed_error(f"before {pending.method} was answered"))

    # -- writing -----------------------------------------------------------------------------

    async def _send(self, message: list[Any]) -> None:
        """Encode and write one frame; encoding errors (``TypeError``...) reach the caller."""
        frame = msgpack.packb(message, use_bin_type=True)
        async with self._write_lock:
            await self._write(frame)

    async def _write(self, data: bytes) -> None:
        if self._broken or self.finished:
            raise self._closed_error()
        timeout = self._limits.send_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                await self._stream.send(data)
        except TimeoutError:
            self._give_up(f"peer took no data for {timeout} s")
            raise self._closed_error() from None
        except _LOST as error:
            self._give_up(f"connection lost ({_describe(error)})")
            raise self._closed_error() from None

    def _give_up(self, reason: str) -> None:
        self._broken = True
        self.close(reason)

    def _closed_error(self, when: str = "") -> RpcConnectionClosed:
        text = f"connection {self.name} closed {when}".rstrip()
        return RpcConnectionClosed(f"{text} ({self.close_reason or 'closed'})")

    async def _close_stream(self) -> None:
        """Close politely (TLS close_notify) unless the peer stopped taking data."""
        with anyio.CancelScope(shield=True):
            if not self._broken:
                with anyio.move_on_after(self._limits.send_timeout_seconds):
                    try:
                        await self._stream.aclose()
                        return
                    except _LOST:
                        pass
            await anyio.aclose_forcefully(self._stream)

    def _log_error(self, code: str, message: str) -> None:
        log.warning("%s: %s: %s", self.name, code, message)


def _describe(error: BaseException) -> str:
    return str(error) or type(error).__name__
