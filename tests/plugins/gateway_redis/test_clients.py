"""What the Redis clients make of a connection the server closed under a write."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.resilience import is_transient
from gateway_redis.clients import connection_errors_named


@pytest.mark.parametrize(
    "leaked",
    [
        AttributeError("'NoneType' object has no attribute 'writelines'"),  # asyncio
        TypeError("'NoneType' object is not callable"),  # asyncio
        RuntimeError(  # uvloop
            "unable to perform operation on <TCPTransport closed=True reading=False "
            "0x555ee2074f20>; the handler is closed"
        ),
    ],
)
def test_a_write_on_a_closed_connection_is_a_connection_error(leaked: Exception) -> None:
    with pytest.raises(RedisConnectionError) as raised, connection_errors_named():
        raise leaked
    assert is_transient(raised.value)  # retried, never dropped as failed


@pytest.mark.parametrize(
    "other", [AttributeError("no attribute 'x'"), RuntimeError("something else")]
)
def test_other_errors_stay_what_they_are(other: Exception) -> None:
    with pytest.raises(type(other)), connection_errors_named():
        raise other
