"""redis-py's asyncio TCP connection, with less Python per command (issue 37).

Every Redis command the gateway sends (one script call per recipe step, and the job's work
around it) went through two costs of redis-py's asyncio connection that its sync one does not
have:

- packing in Python, argument by argument (an encoder call and several ``isinstance`` each:
  a step's commit script has 14 arguments), where hiredis, installed for its reply parser,
  packs the whole command in C (redis-py's sync connection uses it for that);
- the write run as a task of its own (``asyncio.wait_for`` around it, for the socket
  timeout): a task made, scheduled and finished per command, and the bytes sent a turn of
  the event loop later. Here the bytes are handed to the transport at once and only the
  wait for its buffer to drain (which returns at once unless the socket is full) is bounded
  by the timeout.

What goes on the wire is the same bytes (the tests compare both packers); a value redis-py
refuses (``None``, a ``bool``) raises the same ``DataError``.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import Iterable
from functools import cache
from typing import Any

import hiredis
from redis.asyncio.connection import BlockingConnectionPool, Connection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError


class LeanConnection(Connection):
    """``redis.asyncio.Connection`` packing with hiredis and writing without a task."""

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder
        if not _strict_utf8(encoder.encoding, encoder.encoding_errors):
            return super().pack_command(*args)  # hiredis packs text as strict UTF-8
        first = args[0]
        # A command name with its subcommand in one argument ("CONFIG GET") is split, as
        # redis-py does: the server expects them apart.
        if isinstance(first, str):
            if " " in first:
                args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            pass
        # hiredis takes str, int, float and bytes; redis-py also bytearray and memoryview.
        converted: tuple[Any, ...] = tuple(
            bytes(arg) if isinstance(arg, bytearray | memoryview) else arg for arg in args
        )
        try:
            return [hiredis.pack_command(converted)]
        except TypeError:
            refused = next(arg for arg in converted if not _packable(arg))
            raise DataError(
                f"Invalid input of type: '{type(refused).__name__}'. "
                "Convert to a bytes, string, int or float first."
            ) from None

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        """redis-py's, the write handed to the transport at once (see the module docstring);
        failures end the same way: a timeout or a socket error disconnects and raises
        redis-py's ``TimeoutError`` or ``ConnectionError``."""
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            writer = self._writer
            assert writer is not None  # connected above
            writer.writelines(command)
            if self.socket_timeout:
                async with asyncio.timeout(self.socket_timeout):
                    await writer.drain()
            else:
                await writer.drain()
        except TimeoutError:  # the built-in (asyncio's), from the timeout above
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as error:
            await self.disconnect(nowait=True)
            if len(error.args) == 1:
                number, message = "UNKNOWN", error.args[0]
            else:
                number, message = error.args[0], error.args[1]
            raise RedisConnectionError(
                f"Error {number} while writing to socket. {message}."
            ) from error
        except BaseException:
            # As redis-py: a write cut short leaves the connection in an unknown state.
            await self.disconnect(nowait=True)
            raise


@cache
def _strict_utf8(encoding: str, errors: str) -> bool:
    try:
        return errors == "strict" and codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def _packable(value: object) -> bool:
    return isinstance(value, str | bytes | float) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


class LeanBlockingPool(BlockingConnectionPool):
    """redis-py's bounded pool, handing out a free connection without its queue.

    ``BlockingConnectionPool`` queues every command for a connection behind a condition and
    a timeout (a lock, a timer and a wait per command, and another lock on the way back)
    even when connections are free. Here a command takes a free connection directly while
    no other command waits for one; when one waits (every connection busy at
    ``max_connections``), commands queue as redis-py queues them, and a connection given
    back wakes the first of them."""

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        condition = self._condition
        if (
            command_name is None
            and not keys
            and not options
            and not self._in_maintenance
            and not condition.locked()
            and not _waiting(condition)
            and self.can_get_connection()
        ):
            connection = self.get_available_connection()  # type: ignore[no-untyped-call]
            try:
                await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        if command_name is None and not keys and not options:  # no deprecation warning
            return await super().get_connection()  # type: ignore[no-untyped-call]
        return await super().get_connection(command_name, *keys, **options)  # type: ignore[no-untyped-call]

    async def release(self, connection: Any) -> None:
        condition = self._condition
        if self._in_maintenance or condition.locked() or _waiting(condition):
            await super().release(connection)
            return
        await ConnectionPool.release(self, connection)
        if _waiting(condition):  # one came to wait meanwhile: it learns of this connection
            async with condition:
                condition.notify()


def _waiting(condition: asyncio.Condition) -> bool:
    """Whether a task waits on ``condition`` (asyncio keeps them in ``_waiters``)."""
    return bool(condition._waiters)
