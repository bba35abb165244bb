"""docs/line.md's example, as shipped in examples/line/: a line gateway (its settings file) runs
the line Work Master over two scopes of a simulated station's gateway, each gateway with a Redis
of its own, one mosquitto; the line job's result holds both stations' results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.testing import running
from gateway.testing.services import ServerProcess, redis_server
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    connect_mes,
    final_response,
    response_data,
    return_status,
    state_texts,
)
from gateway_simulator.testing import fast_devices, station_environ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

EXAMPLES = Path(__file__).parents[2] / "examples"


def example(path: str) -> Any:
    return json.loads((EXAMPLES / path).read_text())


@pytest.fixture
def stations_redis() -> Iterator[ServerProcess]:
    """The station gateway's own redis-server (the line's is the session's)."""
    server = redis_server().start()
    try:
        yield server
    finally:
        server.close()


async def test_the_example_line_runs_a_job_on_each_station(
    mqtt_url: str, redis_url: str, stations_redis: ServerProcess, unique: str, tmp_path: Path
) -> None:
    stations = f"{unique}-stations"
    station = Gateway.from_environment(
        None,
        station_environ(
            mqtt_url=mqtt_url,
            redis_url=f"redis://127.0.0.1:{stations_redis.port}/0",
            name=stations,
            simulator=fast_devices(f"{stations}-sim"),
        ),
    )
    line = Gateway.from_environment(
        EXAMPLES / "line" / "line.toml",
        {
            "GATEWAY_MQTT_URL": mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": unique,
            "GATEWAY_REDIS_URL": redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": unique,
            "GATEWAY_GATEWAY_INSTANCE_ID": unique,
            "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path),
            "GATEWAY_JOBS_TOPIC_PREFIX": unique,
            "GATEWAY_LINE_TOPIC_PREFIX": stations,
        },
    )
    async with (
        running(station),
        running(line),
        connect_mes(mqtt_url, unique, "line") as mes,
        connect_mes(mqtt_url, stations, "cell1") as fitting,
        connect_mes(mqtt_url, stations, "cell2") as inspection,
    ):
        for station_mes in (fitting, inspection):
            reply = await station_mes.configure("workmaster", example("first-job/workmaster.json"))
            assert return_status(reply) == ReturnStatus.NO_ERROR, reply.data
        reply = await mes.configure("workmaster", example("line/workmaster.json"))
        assert return_status(reply) == ReturnStatus.NO_ERROR, reply.data
        stored = await mes.store(example("line/order.json"), method="StoreAndStart")
        assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data
        response = await final_response(mes, "LINE-0001", timeout=30)
    assert state_texts(response)[:2] == ["Ended", "Completed"], response_data(response)
    results = response_data(response)
    assert results["fit"]["JobOrderID"] == "LINE-0001:fit:1@line"
    assert results["fit"]["tighten"]["torque_ok"] is True
    assert results["fit"]["WorkMasterID"] == "WM-AXLE"
    assert results["inspect"]["JobOrderID"] == "LINE-0001:inspect:1@line"
    assert "camera_qa" in results["inspect"]
