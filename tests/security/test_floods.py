"""H1, H2: nobody who reaches the HTTP or RPC port can stop the station by opening connections.

Against a gateway process with ``ulimit -n 1024`` on the shipped broker configuration, while a
black-box MES stores and reads back jobs (each call answered within 5 s, ``/readyz`` 200,
every job stored still there afterwards):

- live event streams are capped in all and per client address (429 beyond), refused for a
  scope that does not exist, and hold no connection of the Redis pool each: more open streams
  than the pool has connections leave the MES answered;
- a thousand idle connections to each of the HTTP and RPC ports (more than the open-file
  limit) do not make the process run out of files, stop, or keep the probes out; equipment
  with a token still connects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import SocketStream

from gateway.testing import poll_until
from gateway_jobs.testing import job_order
from gateway_msgpack_rpc.device import RpcDevice
from tests.security.station import RPC_TOKEN, HostileStation, probing

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def open_stream(station: HostileStation, path: str) -> tuple[int, SocketStream | None]:
    """Open a live event stream; its status, and the connection while it stays open."""
    stream = await anyio.connect_tcp("127.0.0.1", station.http_port)
    await stream.send(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    data = b""
    with anyio.fail_after(10):
        while b"\r\n" not in data:
            data += await stream.receive()
    status = int(data.split(b" ", 2)[1])
    if status != 200:
        await stream.aclose()
        return status, None
    return status, stream


@contextlib.asynccontextmanager
async def streams_open(station: HostileStation, path: str, count: int) -> AsyncIterator[list[int]]:
    """``count`` streams opened on ``path``, held while the block runs; their statuses."""
    statuses: list[int] = []
    held: list[SocketStream] = []
    try:
        for _ in range(count):
            status, stream = await open_stream(station, path)
            statuses.append(status)
            if stream is not None:
                held.append(stream)
        yield statuses
    finally:
        for stream in held:
            await stream.aclose()


async def test_streams_are_capped_per_client_and_refused_for_unknown_scopes(
    hostile_station: HostileStation,
) -> None:
    station = hostile_station
    await station.start()
    scope_events = f"/api/scopes/{station.scope}/events"
    async with probing(station) as probe:
        await poll_until(lambda: _rounds(probe, 1))  # the scope has its first job
        for number in range(20):  # never followed, never made
            status, _ = await open_stream(station, f"/api/scopes/ghost{number}/events")
            assert status == 404
        async with streams_open(station, scope_events, 150) as statuses:
            assert statuses.count(200) == 10  # ui.max_streams_per_client
            assert statuses.count(429) == 140, statuses
    assert await station.metric("gateway_http_connections_refused_total") == 0


async def test_more_streams_than_redis_connections_leave_the_mes_answered(
    hostile_station: HostileStation,
) -> None:
    """120 open pages with a Redis pool of 16 connections: one shared reader serves them all."""
    station = hostile_station
    station.environ.update(
        {
            "GATEWAY_REDIS_MAX_CONNECTIONS": "16",
            "GATEWAY_UI_MAX_STREAMS": "200",
            "GATEWAY_UI_MAX_STREAMS_PER_CLIENT": "200",
        }
    )
    await station.start()
    async with station.mes() as mes:  # the scope's first job: now it exists
        await mes.store(job_order("FIRST", work_masters=["WM"]))
    scope_events = f"/api/scopes/{station.scope}/events"
    async with streams_open(station, scope_events, 120) as statuses:
        assert statuses == [200] * 120
        async with probing(station) as probe:
            await poll_until(lambda: _rounds(probe, 10), timeout=30)
        # The streams are live: the last one opened sees the jobs the MES stored.
        _, watcher = await open_stream(station, f"{scope_events}?after=0-0")
        assert watcher is not None
        async with watcher:
            seen = b""
            with anyio.fail_after(10):
                while probe.stored[-1].encode() not in seen:
                    seen += await watcher.receive()


async def _rounds(probe: object, count: int) -> bool:
    return getattr(probe, "rounds", 0) >= count


async def test_a_thousand_idle_connections_on_each_port_stop_nothing(
    hostile_station: HostileStation,
) -> None:
    station = hostile_station
    await station.start()
    held: list[SocketStream] = []
    async with probing(station) as probe:
        for port in (station.http_port, station.rpc_port):
            for _ in range(1100):
                with anyio.move_on_after(2):  # a connection the server's backlog drops
                    held.append(await anyio.connect_tcp("127.0.0.1", port))
        target = probe.rounds + 3
        await poll_until(lambda: _rounds(probe, target), timeout=30)
        # Equipment that proves who it is still gets in, and is kept.
        async with RpcDevice.connect(
            "127.0.0.1", station.rpc_port, "press", token=RPC_TOKEN, heartbeat_seconds=0.5
        ) as device:
            assert device.welcome
            for _ in range(300):  # more idle connections after it: it is not the one evicted
                with anyio.move_on_after(2):
                    held.append(await anyio.connect_tcp("127.0.0.1", station.rpc_port))
            await device.heartbeat()
    for stream in held:
        await stream.aclose()
    assert len(held) > 2000
    log = station.log_text()
    assert "Too many open files" not in log
    assert "binding msgpack-rpc failed" not in log
