"""One simulated station served over OPC UA by two gateway instances, for the whole module.

Starting an OPC UA server loads four NodeSets (seconds on a loaded 2-core machine), so the
instances start once per module; each test uses job ids of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from gateway.app import Gateway
from gateway.testing import running
from gateway.testing.services import free_port
from gateway_opcua.testing import OpcStation, client_certificate, station_environment


@pytest.fixture(scope="module")
async def opc_station(
    mqtt_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[OpcStation]:
    name = f"t{uuid.uuid4().hex[:12]}"
    data_dir = tmp_path_factory.mktemp("opcua")
    ports = [free_port(), free_port()]
    gateways = [
        Gateway.from_environment(
            None, station_environment(name, mqtt_url, redis_url, data_dir, "a", ports[0], "all")
        ),
        # The second instance runs no simulator (one station) but its own OPC UA server and
        # recipe engine over the same store.
        Gateway.from_environment(
            None, station_environment(name, mqtt_url, redis_url, data_dir, "b", ports[1], "gateway")
        ),
    ]
    certificates = await client_certificate(data_dir)
    async with AsyncExitStack() as stack:
        for gateway in gateways:
            await stack.enter_async_context(running(gateway))
        yield OpcStation(
            name,
            mqtt_url,
            [f"opc.tcp://127.0.0.1:{port}" for port in ports],
            certificates,
            gateways,
        )
