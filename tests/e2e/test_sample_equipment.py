"""The sample equipment script of ``docs/drivers.md`` (``examples/equipment/press.py``) runs a
job's command through the gateway's MQTT equipment driver, over real mosquitto and Redis."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import pytest

from gateway.app import Gateway
from gateway.testing import running
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, response_data, return_status, work_master
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "examples" / "equipment" / "press.py"


def test_the_drivers_guide_shows_the_script_as_it_is() -> None:
    guide = (ROOT / "docs" / "drivers.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    assert SCRIPT.read_text(encoding="utf-8") in blocks


async def test_the_sample_equipment_answers_a_jobs_command(
    mqtt_url: str, redis_url: str, unique: str, tmp_path: Path
) -> None:
    press = f"press-{unique}"
    environ = {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": unique,
        "GATEWAY_GATEWAY_INSTANCE_ID": unique,  # its MQTT client ids: no other test's
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": unique,
        "GATEWAY_JOBS_TOPIC_PREFIX": unique,
        "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": press,
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
    }
    recipe = {
        "steps": [{"name": "Press", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Press", "target": "Done"}],
        "actions": [
            {
                "name": "press",
                "step": "Press",
                "interaction": "push_command",
                "type_id": "com.example.press.v1",
                "equipment": press,
                "timeout_seconds": 20,
            }
        ],
    }
    log_path = tmp_path / "press.log"
    with log_path.open("wb") as log:
        device = await anyio.open_process(
            [sys.executable, str(SCRIPT), mqtt_url, press], stdout=log, stderr=log
        )
    async with device:
        try:
            gateway = Gateway.from_environment(None, environ)
            async with (
                running(gateway),
                connect_test_client(mqtt_url) as client,
            ):
                # Its first heartbeat comes once it has subscribed: a command then reaches it.
                hub = gateway.equipment
                with anyio.fail_after(30):
                    while not (await hub.liveness(press)).online:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                mes = JobsMes(client, unique, "cell1")
                wm = work_master("WM", recipe, dataschema=DATASCHEMA)
                configured = await mes.configure("workmaster", wm)
                assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
                order = job_order("J1", work_masters=["WM"])
                stored = await mes.store(order, method="StoreAndStart")
                assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data
                with anyio.fail_after(30):
                    while True:
                        response = (await mes.job_response("J1")).data["JobResponse"]
                        if response["JobState"][0]["StateText"]["Text"] in ("Ended", "Aborted"):
                            break
                        await anyio.sleep(0.05)
        finally:
            device.terminate()
            await device.wait()
    assert [s["StateText"]["Text"] for s in response["JobState"]] == ["Ended", "Completed"]
    assert response_data(response)["press"] == {"pressed": True, "force_kn": 12.5}
    assert "J1:press:1" in (tmp_path / "press.log").read_text()
