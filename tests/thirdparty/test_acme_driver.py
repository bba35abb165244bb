"""A third-party equipment driver distribution, built as a wheel and installed beside the gateway.

``gateway-acme-driver`` (next to this file) subclasses the MQTT equipment driver and only
shapes payloads. The gateway must find it through its entry point, and a job whose action
names an ACME nutrunner must run end to end: MES over MQTT, jobs and the SFC engine on Redis,
the ACME driver, and a nutrunner (an MQTT client speaking ACME's payloads).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt, to_mqtt
from gateway.testing import running
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_sfc.model import DATASCHEMA

SOURCE = Path(__file__).parent / "gateway-acme-driver"
TIGHTEN = "com.acme.nutrunner.tighten.v1"
RECIPE = {
    "steps": [{"name": "Tighten", "initial": True}, {"name": "Done"}],
    "transitions": [{"source": "Tighten", "target": "Done"}],
    "actions": [
        {
            "name": "tighten",
            "step": "Tighten",
            "interaction": "push_command",
            "type_id": TIGHTEN,
            "equipment": "nutrunner1",
            "timeout_seconds": 5,
            "parameters": {"program": 7, "torque_spec": "42Nm"},
        }
    ],
}


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the driver's wheel once and install it into a directory of its own."""
    work = tmp_path_factory.mktemp("acme-driver")
    source = work / "src"
    shutil.copytree(SOURCE, source)  # building writes build/ and egg-info next to the sources
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip"]
    # No build isolation: the test extras bring setuptools, so nothing is downloaded.
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, source],
        check=True,
        capture_output=True,
    )
    [wheel] = wheels.glob("gateway_acme_driver-0.3.0-*.whl")
    site = work / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", site, wheel], check=True, capture_output=True
    )
    assert (site / "gateway_acme" / "plugin.py").exists()
    return site


def test_gateway_plugins_lists_the_driver_with_its_distribution_and_hooks(site_dir: Path) -> None:
    script = Path(sys.executable).with_name("gateway")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli"]
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GATEWAY_")}
    environ.update({"PYTHONPATH": str(site_dir), "GATEWAY_PLUGINS_BLOCK": "redis"})
    result = subprocess.run(
        [*command, "plugins"], env=environ, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("acme 0.3.0 (gateway-acme-driver)")
    assert [line.strip() for line in lines[start + 1 : start + 3]] == [
        "gateway_add_settings",
        "gateway_register_equipment_drivers",
    ]


@pytest.fixture
def acme_site(site_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The installed distribution on ``sys.path``, so its entry point is found in-process."""
    monkeypatch.syspath_prepend(str(site_dir))
    yield site_dir
    for name in [name for name in sys.modules if name.startswith("gateway_acme")]:
        del sys.modules[name]


def acme_gateway(mqtt_url: str, redis_url: str, name: str) -> Gateway:
    environ = {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": name,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": name,
        "GATEWAY_GATEWAY_INSTANCE_ID": name,
        "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
        "GATEWAY_JOBS_TOPIC_PREFIX": name,
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
        "GATEWAY_ACME_TOPIC_PREFIX": f"{name}-acme",
        "GATEWAY_ACME_EQUIPMENT": "nutrunner1",
    }
    return Gateway.from_environment(None, environ)


@asynccontextmanager
async def nutrunner(
    client: MqttTestClient, prefix: str, answer: dict[str, Any]
) -> AsyncIterator[list[CloudEvent]]:
    """ACME nutrunner ``nutrunner1``: answers every command with ``answer`` (ACME's payload)."""
    received: list[CloudEvent] = []
    async with (
        client.watch(f"{prefix}/nutrunner1/commands") as commands,
        anyio.create_task_group() as tasks,
    ):

        async def serve() -> None:
            async for message in commands:
                command = from_mqtt(message)
                received.append(command)
                assert message.response_topic is not None
                reply = to_mqtt(
                    command.reply(source="urn:acme:nutrunner1", data=answer), message.response_topic
                )
                await client.publish(
                    dataclasses.replace(reply, correlation_data=message.correlation_data)
                )

        tasks.start_soon(serve)
        yield received
        tasks.cancel_scope.cancel()


async def run_to_end(mes: JobsMes) -> dict[str, Any]:
    configured = await mes.configure("workmaster", work_master("WM", RECIPE, dataschema=DATASCHEMA))
    assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
    stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
    assert return_status(stored) == ReturnStatus.NO_ERROR
    with anyio.fail_after(10):
        while True:
            response: dict[str, Any] = (await mes.job_response("J1")).data["JobResponse"]
            states = [state["StateText"]["Text"] for state in response["JobState"]]
            if {"Ended", "Aborted"} & set(states):
                return response
            await anyio.sleep(0.05)


def outcome(response: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    states = [state["StateText"]["Text"] for state in response["JobState"]]
    data = {entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])}
    return states, data


@pytest.mark.anyio
@pytest.mark.integration
async def test_the_installed_driver_drives_an_action_of_a_job_end_to_end(
    acme_site: Path, mqtt_url: str, redis_url: str, unique: str
) -> None:
    gateway = acme_gateway(mqtt_url, redis_url, unique)
    [driver] = [d for d in gateway.equipment.drivers if d.name == "acme"]
    assert Path(sys.modules[type(driver).__module__].__file__ or "").is_relative_to(acme_site)
    async with (
        running(gateway),
        connect_test_client(mqtt_url) as client,
        nutrunner(client, f"{unique}-acme", {"Status": "OK", "TorqueNm": 42.3}) as received,
    ):
        states, data = outcome(await run_to_end(JobsMes(client, unique, "cell1")))
    assert states[:2] == ["Ended", "Completed"]
    assert data["tighten"] == {"torque": 42.3, "unit": "Nm"}  # read_reply shaped it
    [command] = received
    assert command.data == {"Program": 7, "TargetTorqueNm": 42.0}  # payload_for shaped it
    assert command.correlationid == "J1:tighten:1"


@pytest.mark.anyio
@pytest.mark.integration
async def test_a_not_ok_from_the_nutrunner_aborts_the_job_with_its_code(
    acme_site: Path, mqtt_url: str, redis_url: str, unique: str
) -> None:
    async with (
        running(acme_gateway(mqtt_url, redis_url, unique)),
        connect_test_client(mqtt_url) as client,
        nutrunner(client, f"{unique}-acme", {"Status": "NOK", "Code": "E042"}),
    ):
        states, data = outcome(await run_to_end(JobsMes(client, unique, "cell1")))
    assert states[0] == "Aborted"
    assert "NOK E042" in data["Error"]
