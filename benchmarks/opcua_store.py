"""Benchmark: Store calls per second over OPC UA, next to the same over MQTT.

Starts a private redis-server and mosquitto, and the gateway as a process of its own (``gateway
run``) with the OPC UA server on. The Work Master is configured over MQTT; then N jobs are
stored one after another over OPC UA (Basic256Sha256 SignAndEncrypt, user and password: what a
plant would use) and N over MQTT (CloudEvent request and reply, QoS 1), each call waiting for
its reply. Each batch is cancelled (untimed) before the next, so both start from an empty scope.

It prints calls/s and the median and 99th-percentile latency of each, the OPC UA figure as a
ratio of the MQTT one, and what the OPC UA server costs at start-up: the time from launch to
ready and the resident memory of the gateway process, with the OPC UA server on and off.

    python benchmarks/opcua_store.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio

from gateway.jobmethods import JobMethod
from gateway.testing.mqtt import connect_test_client
from gateway.testing.processes import GatewayProcess
from gateway.testing.services import free_port, mosquitto, redis_server
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_opcua.testing import JobsClient, client_certificate, connect
from gateway_sfc.model import DATASCHEMA

SCOPE = "cell1"
PREFIX = "bench"
USER, PASSWORD = "mes", "benchmark-password"
RECIPE = json.loads((Path(__file__).parents[1] / "examples/recipes/rear_axle.json").read_text())
READY = " started (role all)"  # what ``gateway run`` logs once it is up


@contextmanager
def gateway_process(
    redis_url: str, mqtt_url: str, directory: Path, *, opcua_port: int | None
) -> Iterator[tuple[subprocess.Popen[bytes], float]]:
    """``gateway run`` with the given servers; yields the process and its start-up seconds."""
    environ = {
        **os.environ,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_MQTT_URL": mqtt_url,
        # The gateway without OPC UA only measures start-up: topics and keys of its own, so
        # the session the broker keeps for it after it stops takes no commands.
        "GATEWAY_JOBS_TOPIC_PREFIX": PREFIX if opcua_port else f"{PREFIX}-plain",
        "GATEWAY_REDIS_KEY_PREFIX": PREFIX if opcua_port else f"{PREFIX}-plain",
        "GATEWAY_MQTT_SHARE_GROUP": PREFIX if opcua_port else f"{PREFIX}-plain",
        "GATEWAY_GATEWAY_DATA_DIR": str(directory),
        "GATEWAY_GATEWAY_INSTANCE_ID": f"bench-{opcua_port or 'mqtt'}",
        "GATEWAY_GATEWAY_LOG_LEVEL": "INFO",
        "GATEWAY_MSGPACK_RPC_PORT": "0",
    }
    if opcua_port is not None:
        environ |= {
            "GATEWAY_OPCUA_ENABLED": "true",
            "GATEWAY_OPCUA_ENDPOINT": f"opc.tcp://127.0.0.1:{opcua_port}",
            "GATEWAY_OPCUA_USERNAME": USER,
            "GATEWAY_OPCUA_PASSWORD": PASSWORD,
            "GATEWAY_OPCUA_SCOPES": SCOPE,
        }
    log = directory / f"gateway-{opcua_port or 'mqtt'}.log"
    gateway = GatewayProcess(None, environ, log, READY, arguments=("run",))
    started = time.perf_counter()
    gateway.start()
    try:
        gateway.wait_ready()
        assert gateway.process is not None
        yield gateway.process, time.perf_counter() - started
    finally:
        gateway.stop(timeout=20)


def resident_mb(process: subprocess.Popen[bytes]) -> float:
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def timed(calls: int, call: Callable[[int], Awaitable[None]]) -> list[float]:
    latencies = []
    for number in range(calls):
        begun = time.perf_counter()
        await call(number)
        latencies.append(time.perf_counter() - begun)
    return latencies


def report(name: str, latencies: list[float]) -> float:
    rate = len(latencies) / sum(latencies)
    cut = statistics.quantiles(latencies, n=100)
    print(
        f"  {name:<34} {rate:8.0f} calls/s   p50 {statistics.median(latencies) * 1000:6.2f} ms"
        f"   p99 {cut[98] * 1000:6.2f} ms"
    )
    return rate


async def store_calls(mqtt_url: str, endpoint: str, directory: Path, calls: int) -> None:
    certificates = await client_certificate(directory)
    async with connect_test_client(mqtt_url) as broker:
        mes = JobsMes(broker, PREFIX, SCOPE)
        recipe = work_master("WM", RECIPE, dataschema=DATASCHEMA)
        configured = await mes.configure("workmaster", recipe)
        assert return_status(configured) == 1, configured.data
        started = time.perf_counter()
        async with connect(
            endpoint, certificates, username=USER, password=PASSWORD, load_types=True
        ) as session:
            print(
                f"  OPC UA session (SignAndEncrypt, login, type definitions read): "
                f"{time.perf_counter() - started:.2f} s"
            )
            client = JobsClient(session, SCOPE)

            async def opcua_store(number: int, name: str = "U") -> None:
                status = await client.store(job_order(f"{name}{number}", work_masters=["WM"]))
                assert status == 1, status

            async def warm_up(number: int) -> None:
                await opcua_store(number, "W")

            async def mqtt_store(number: int) -> None:
                reply = await mes.store(job_order(f"M{number}", work_masters=["WM"]))
                assert return_status(reply) == 1, reply.data

            await timed(10, warm_up)
            opcua = await timed(calls, opcua_store)
            for number in range(calls):
                await mes.act("Cancel", f"U{number}")
            mqtt = await timed(calls, mqtt_store)
            for number in range(calls):
                await client.act(JobMethod.CANCEL, f"M{number}")
        print(f"Store, {calls} calls one after another (reply awaited), same gateway process:")
        opcua_rate = report("OPC UA (SignAndEncrypt)", opcua)
        mqtt_rate = report("MQTT v5 CloudEvents (QoS 1)", mqtt)
        print(f"  OPC UA / MQTT: {opcua_rate / mqtt_rate:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        redis, broker = redis_server().start(), mosquitto().start()
        try:
            redis_url = f"redis://127.0.0.1:{redis.port}/0"
            mqtt_url = f"mqtt://127.0.0.1:{broker.port}"
            with gateway_process(redis_url, mqtt_url, directory, opcua_port=None) as (plain, up):
                plain_seconds, plain_mb = up, resident_mb(plain)
            port = free_port()
            with gateway_process(redis_url, mqtt_url, directory, opcua_port=port) as (server, up):
                print("Gateway process start-up (launch to ready) and resident memory:")
                print(f"  without OPC UA  {plain_seconds:6.1f} s   {plain_mb:6.0f} MB")
                print(f"  with OPC UA     {up:6.1f} s   {resident_mb(server):6.0f} MB")
                log = (directory / f"gateway-{port}.log").read_text()
                found = re.search(r"up in [\d.]+ s, NodeSets [\d.]+ s", log)
                print(f"  OPC UA server: {found[0] if found else '(not in the log)'}")
                anyio.run(
                    store_calls, mqtt_url, f"opc.tcp://127.0.0.1:{port}", directory, args.calls
                )
        finally:
            redis.close()
            broker.close()


if __name__ == "__main__":
    main()
