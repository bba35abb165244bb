"""/healthz, /readyz and /metrics of a running gateway, against real Redis."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.errors import PluginError
from gateway.hookspecs import ASGIApp, hookimpl
from gateway.settings import Settings
from gateway.testing import running, wait_until
from gateway.testing.equipment import TestEquipment
from gateway.testing.services import ServerProcess, free_port, redis_server
from gateway_jobs.testing import JobsMes, job_order, work_master
from gateway_mqtt.clients import connect_test_client
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

RECIPE = {
    "steps": [{"name": "Tighten", "initial": True}, {"name": "Done"}],
    "transitions": [{"source": "Tighten", "target": "Done"}],
    "actions": [
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": "com.example.tighten.v1",
        }
    ],
}


async def http_get(port: int, path: str) -> tuple[int, str]:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(
            f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode()
        )
        response = b""
        try:
            while True:
                response += await stream.receive()
        except anyio.EndOfStream:
            pass
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


def gateway(redis_url: str, unique: str, port: int, **extra: Any) -> Gateway:
    environ = {
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": unique,
        "GATEWAY_MQTT_URL": f"memory://{unique}",
        "GATEWAY_JOBS_TOPIC_PREFIX": unique,
        "GATEWAY_GATEWAY_INSTANCE_ID": unique,
        "GATEWAY_HTTP_PORT": str(port),
    }
    return Gateway.from_environment(None, environ, extra_plugins=extra)


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text (0 when absent)."""
    for line in metrics.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            return float(match.group(3))
    return 0.0


async def test_health_and_readiness_of_a_running_gateway(redis_url: str, unique: str) -> None:
    port = free_port()
    async with running(gateway(redis_url, unique, port)):
        assert await http_get(port, "/healthz") == (200, "ok\n")
        status, body = await http_get(port, "/readyz")
        assert status == 200
        readiness = json.loads(body)
        assert readiness["ready"] is True
        assert readiness["checks"]["started"] is True
        assert readiness["checks"]["store"] is True
        assert readiness["checks"]["binding mqtt"] is True
        assert (await http_get(port, "/nowhere"))[0] == 404


@pytest.fixture
def own_redis() -> Iterator[ServerProcess]:
    server = redis_server().start()
    try:
        yield server
    finally:
        server.close()


async def test_readyz_turns_unready_while_redis_is_down(
    own_redis: ServerProcess, unique: str
) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    async with running(gateway(url, unique, port)):
        assert (await http_get(port, "/readyz"))[0] == 200
        own_redis.stop()
        status, body = await http_get(port, "/readyz")
        assert status == 503
        assert json.loads(body)["checks"]["store"] is False
        own_redis.start()

        async def ready() -> bool:
            return (await http_get(port, "/readyz"))[0] == 200

        with anyio.fail_after(10):
            while not await ready():  # noqa: ASYNC110
                await anyio.sleep(0.1)


async def test_metrics_move_while_a_recipe_runs(redis_url: str, unique: str) -> None:
    port = free_port()
    equipment = TestEquipment()
    async with running(gateway(redis_url, unique, port, equipment=equipment)):
        before = (await http_get(port, "/metrics"))[1]
        async with connect_test_client(f"memory://{unique}") as client:
            mes = JobsMes(client, unique, "cell")
            await mes.configure("workmaster", work_master("WM", RECIPE, dataschema=DATASCHEMA))
            await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
            await wait_until(lambda: equipment.received)

            async def ended() -> bool:
                text = (await http_get(port, "/metrics"))[1]
                return sample(text, "gateway_jobs", scope="cell", state="Ended") == 1

            with anyio.fail_after(10):
                while not await ended():  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        after = (await http_get(port, "/metrics"))[1]
    assert sample(before, "gateway_equipment_commands_total", type="com.example.tighten.v1") == 0
    assert sample(after, "gateway_equipment_commands_total", type="com.example.tighten.v1") == 1
    assert sample(after, "gateway_equipment_reply_seconds_count", outcome="ok") == 1
    assert (
        sample(after, "gateway_job_methods_total", method="StoreAndStart", status="NO_ERROR") == 1
    )
    assert sample(after, "gateway_recipe_step_seconds_count", step="Tighten") == 1
    assert sample(after, "gateway_recipe_charts_ended_total", outcome="completed") == 1
    assert sample(after, "gateway_messages_total", binding="mqtt", outcome="ok") >= 2
    handled = sample(after, "gateway_message_seconds_count", binding="mqtt", processor="jobs")
    assert handled >= 2  # the Work Master and the StoreAndStart
    assert "gateway_work_stream_lag" in after


async def test_probes_answer_while_the_broker_is_still_being_reached(
    redis_url: str, unique: str
) -> None:
    port = free_port()
    environ = {
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": unique,
        "GATEWAY_MQTT_URL": f"mqtt://127.0.0.1:{free_port()}",  # nobody listens there
        "GATEWAY_GATEWAY_INSTANCE_ID": unique,
        "GATEWAY_HTTP_PORT": str(port),
    }
    gateway = Gateway.from_environment(None, environ)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(gateway.run)
            await wait_until(lambda: gateway.binding("mqtt").reconnects >= 1)  # type: ignore[attr-defined]
            assert await http_get(port, "/healthz") == (200, "ok\n")
            status, body = await http_get(port, "/readyz")
            assert status == 503
            assert json.loads(body)["checks"]["binding mqtt"] is False
            gateway.request_stop("test finished")


class _HelloApp:
    """A plugin's own web application, mounted through ``gateway_register_http_apps``."""

    @hookimpl
    def gateway_register_http_apps(
        self, register: Callable[[str, ASGIApp], None], settings: Settings, gateway: Gateway
    ) -> None:
        register("/hello", self.app)

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = f"hello from {scope['path']}\n".encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def test_a_plugin_mounts_its_application(redis_url: str, unique: str) -> None:
    port = free_port()
    async with running(gateway(redis_url, unique, port, hello=_HelloApp())):
        status, body = await http_get(port, "/hello/there")
        assert (status, body) == (200, "hello from /hello/there\n")
        assert await http_get(port, "/healthz") == (200, "ok\n")


def test_two_applications_cannot_share_a_prefix(redis_url: str, unique: str) -> None:
    with pytest.raises(PluginError, match="/hello"):
        gateway(redis_url, unique, free_port(), one=_HelloApp(), two=_HelloApp())
