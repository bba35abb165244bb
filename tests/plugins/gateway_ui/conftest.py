"""A gateway with the simulated station and its HTTP endpoint, and a small HTTP/SSE client.

Tests get them through the ``station`` fixture (``Station`` and its helpers as attributes).
Browser tests get Debian's chromium, headless through chromedriver (``browser``, one per module).
Trace writer tests get a redis-server of their own (``trace_redis``: its command counts are
theirs alone) and a ``TraceWriter`` on it (``trace_writer``).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.webdriver import WebDriver

from gateway.app import Gateway
from gateway.resilience import Readiness, Resilience
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import ServerProcess, free_port, redis_server
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_redis.settings import RedisSettings
from gateway_redis.store import RedisStore
from gateway_sfc.model import DATASCHEMA
from gateway_ui.settings import UiSettings
from gateway_ui.trace_writer import TraceWriter

REAR_AXLE = json.loads(
    (Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json").read_text()
)
SCOPE = "cell1"


@dataclass
class Station:
    """One gateway (real mosquitto and Redis) running the simulated station."""

    mqtt_url: str
    redis_url: str
    name: str
    port: int = field(default_factory=free_port)
    scope = SCOPE
    rear_axle = REAR_AXLE

    def gateway(self, *, seconds: float = 0.05, **settings: str) -> Gateway:
        """``seconds``: how long positioning and tightening take (the camera takes longer, so
        the torque result is in before the chart waits for it); ``settings``: more variables."""
        environ = {
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-a",
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "3",
            "GATEWAY_JOBS_TOPIC_PREFIX": self.name,
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
            "GATEWAY_HTTP_PORT": str(self.port),
            "GATEWAY_SIMULATOR_ENABLED": "true",
            "GATEWAY_SIMULATOR_TOPIC_PREFIX": f"{self.name}-sim",
            "GATEWAY_SIMULATOR_POSITION_SECONDS": str(seconds),
            "GATEWAY_SIMULATOR_TIGHTEN_SECONDS": str(seconds),
            "GATEWAY_SIMULATOR_INSPECT_SECONDS": str(3 * seconds + 0.3),
            "GATEWAY_SIMULATOR_HEARTBEAT_SECONDS": "0.2",
            "GATEWAY_SIMULATOR_SEED": "1",
            **settings,
        }
        return Gateway.from_environment(None, environ)

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, SCOPE)

    async def request(
        self, path: str, method: str = "GET", headers: dict[str, str] | None = None
    ) -> Reply:
        return await request(self.port, path, method, headers)

    async def get_json(self, path: str) -> Any:
        return await get_json(self.port, path)

    def sse(
        self, path: str, headers: dict[str, str] | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[Event]]:
        return sse(self.port, path, headers)

    async def start_rear_axle(self, mes: JobsMes, *jobs: str) -> None:
        await start_rear_axle(mes, *jobs)

    @staticmethod
    def basic(user: str, password: str) -> dict[str, str]:
        return basic(user, password)


async def start_rear_axle(mes: JobsMes, *jobs: str) -> None:
    configured = await mes.configure(
        "workmaster", work_master("WM", REAR_AXLE, dataschema=DATASCHEMA)
    )
    assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
    for job in jobs:
        stored = await mes.store(job_order(job, work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == ReturnStatus.NO_ERROR


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def request(
    port: int, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> Reply:
    """One HTTP/1.0 request (the body ends with the connection)."""
    lines = [f"{method} {path} HTTP/1.0", f"Host: 127.0.0.1:{port}", "Content-Length: 0"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        raw = b""
        try:
            while True:
                raw += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return Reply(int(status_line.split(" ")[1]), parsed, body)


async def get_json(port: int, path: str) -> Any:
    reply = await request(port, path)
    assert reply.status == 200, (path, reply.status, reply.body)
    return reply.json()


@dataclass
class Event:
    event: str | None
    data: Any
    id: str | None


@asynccontextmanager
async def sse(
    port: int, path: str, headers: dict[str, str] | None = None
) -> AsyncIterator[AsyncIterator[Event]]:
    """The events of a Server-Sent Events response, as they arrive."""
    lines = [f"GET {path} HTTP/1.0", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())

        async def events() -> AsyncIterator[Event]:
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                buffer += await stream.receive()
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") or head.startswith(b"HTTP/1.0 200"), head
            while True:
                while b"\n\n" not in buffer:
                    buffer += await stream.receive()
                block, _, buffer = buffer.partition(b"\n\n")
                fields: dict[str, str] = {}
                for line in block.decode().split("\n"):
                    name, _, value = line.partition(": ")
                    fields[name] = value
                if "data" in fields:
                    yield Event(fields.get("event"), json.loads(fields["data"]), fields.get("id"))

        yield events()


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


@pytest.fixture(scope="module")
def trace_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A redis-server for this module's tests alone (one at a time: counts are theirs)."""
    server = redis_server(tmp_path_factory.mktemp("trace-redis")).start()
    try:
        yield server
    finally:
        server.close()


@dataclass
class TraceBench:
    """A ``TraceWriter`` on ``trace_redis`` with the stand-ins of the gateway it needs."""

    store: RedisStore
    gateway: SimpleNamespace
    readiness: Readiness

    def writer(self, **settings: Any) -> TraceWriter:
        return TraceWriter(UiSettings(**settings), self.gateway)

    async def commands(self, name: str) -> int:
        """How often the server ran ``name`` since the test began (INFO commandstats), the
        calls that failed left out (an ``EVALSHA`` of a script the server has not loaded yet:
        redis-py loads it and calls again)."""
        stats = (await self.store.client.info("commandstats")).get(f"cmdstat_{name}", {})
        return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0))


@pytest.fixture
async def trace_bench(trace_redis: ServerProcess, tmp_path: Path) -> AsyncIterator[TraceBench]:
    settings = RedisSettings(url=f"redis://127.0.0.1:{trace_redis.port}/0", key_prefix="t")
    async with RedisStore(settings, tmp_path) as store:
        await store.client.flushall()
        await store.client.config_resetstat()
        readiness = Readiness()
        resilience = Resilience(readiness, minimum_seconds=0.01, maximum_seconds=0.1)
        gateway = SimpleNamespace(
            store=store, resilience=resilience, instance_id="i", stopping=anyio.Event()
        )
        yield TraceBench(store, gateway, readiness)


CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1500,1100",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("the browser tests need Debian's chromium and chromium-driver (see .ci/run)")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a driver or browser
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in CHROMIUM_ARGS:
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
