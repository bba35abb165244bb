"""Reading streams of many scopes at once, on one node as on a Cluster.

One node (or a Sentinel-watched master) takes a single blocking XREAD / XREADGROUP over every
stream. A Cluster refuses a command whose keys lie in different slots, and every scope is a
slot of its own, so there the streams are read with one non-blocking command each, pipelined:
redis-py sends each node its share in one round trip, over one connection per node, however
many scopes there are. While nothing waits, the reader asks again every ``poll_ms`` until the
block time is up: a blocking read per scope would hold a connection per scope.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

import anyio

from gateway.store import StreamBatch

if TYPE_CHECKING:
    from redis.asyncio import Redis


class StreamReader:
    def __init__(self, client: Callable[[], Redis], *, clustered: bool, poll_ms: int) -> None:
        self._client = client
        self._clustered = clustered
        self._poll = poll_ms / 1000

    async def read(
        self,
        streams: Mapping[str, str],
        *,
        group: tuple[str, str] | None = None,
        count: int | None = None,
        block_ms: int | None = None,
    ) -> list[StreamBatch]:
        if not streams:
            return []
        if not self._clustered:
            return await self._read_at_once(dict(streams), group, count, block_ms)
        deadline = None if not block_ms else time.monotonic() + block_ms / 1000
        while True:
            batches = await self._read_pipelined(streams, group, count)
            if batches or block_ms is None:
                return batches
            wait = self._poll
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return []
            await anyio.sleep(wait)

    async def _read_at_once(
        self,
        streams: dict[str, str],
        group: tuple[str, str] | None,
        count: int | None,
        block_ms: int | None,
    ) -> list[StreamBatch]:
        client = self._client()
        reply: object
        if group is None:
            reply = await client.xread(
                streams,  # type: ignore[arg-type]  # redis-py types stream ids too narrowly
                count=count,
                block=block_ms,
            )
        else:
            reply = await client.xreadgroup(
                group[0],
                group[1],
                streams,  # type: ignore[arg-type]
                count=count,
                block=block_ms,
            )
        return cast(list[StreamBatch], reply or [])

    async def _read_pipelined(
        self, streams: Mapping[str, str], group: tuple[str, str] | None, count: int | None
    ) -> list[StreamBatch]:
        async with self._client().pipeline(transaction=False) as pipe:
            for stream, after in streams.items():
                if group is None:
                    pipe.xread({stream: after}, count=count)
                else:
                    pipe.xreadgroup(group[0], group[1], {stream: after}, count=count)
            replies = await pipe.execute(raise_on_error=False)
        batches: list[StreamBatch] = []
        failures: list[Exception] = []
        for reply in replies:
            if isinstance(reply, Exception):
                failures.append(reply)
            else:
                batches.extend(cast(list[StreamBatch], reply or []))
        # A stream that failed (NOGROUP, say) delivered nothing; the ones that did deliver
        # must reach the caller (for a group, their entries are now pending on it), so the
        # failure is raised, unchanged, only when there is nothing else to return: the
        # caller's next read meets it again.
        if failures and not batches:
            raise failures[0]
        return batches
