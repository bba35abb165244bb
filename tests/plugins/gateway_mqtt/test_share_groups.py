"""Share groups never cross stores: a stopped gateway on another store takes no commands.

The commissioning-day story: a laptop gateway with the embedded Redis joined the plant's broker
with the plant's share group, and was stopped. Alone in its own store, it kept its session (so
that commands wait for it), and mosquitto handed every second command of the group to that
dead session. The share group on the broker now carries the store's identity.
"""

from __future__ import annotations

import logging

import pytest

from gateway.app import Gateway
from gateway.testing import running
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import ScriptedInterpreterPlugin, connect_mes, return_status

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def gateway(mqtt_url: str, redis_url: str, unique: str, instance: str, store: str) -> Gateway:
    environ = {
        "GATEWAY_PLUGINS_BLOCK": "sfc,sequence",
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": unique,  # the same group, as in the shipped example
        "GATEWAY_MQTT_SESSION_EXPIRY_SECONDS": "600",
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": f"{unique}-{store}",  # another store
        "GATEWAY_GATEWAY_INSTANCE_ID": f"{unique}-{instance}",
        "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
        "GATEWAY_JOBS_TOPIC_PREFIX": unique,
    }
    plugins = {"recipes": ScriptedInterpreterPlugin()}
    return Gateway.from_environment(None, environ, extra_plugins=plugins)


async def test_a_stopped_gateway_on_another_store_takes_no_commands(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway_mqtt.binding")
    laptop = gateway(mqtt_url, redis_url, unique, "laptop", "laptop")
    async with running(laptop):
        pass  # started, then stopped gracefully: alone in its store, it keeps its session
    kept = [r.getMessage() for r in caplog.records if "kept the MQTT session" in r.getMessage()]
    assert kept, "a graceful stop that keeps the session says so"
    assert "no other live instance on this store" in kept[0]
    plant = gateway(mqtt_url, redis_url, unique, "plant", "plant")
    async with running(plant), connect_mes(mqtt_url, unique) as mes:
        assert plant.binding("mqtt").share_name != laptop.binding("mqtt").share_name  # type: ignore[attr-defined]
        for number in range(6):  # `gateway jobs list` sends 6: every one is answered
            reply = await mes.act("RequestJobResponseByJobOrderID", f"J{number}")
            assert return_status(reply) == ReturnStatus.UNKNOWN_JOB_ORDER_ID


async def test_instances_on_one_store_share_one_group(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    first = gateway(mqtt_url, redis_url, unique, "a", "plant")
    second = gateway(mqtt_url, redis_url, unique, "b", "plant")
    async with running(first), running(second):
        names = {g.binding("mqtt").share_name for g in (first, second)}  # type: ignore[attr-defined]
    assert len(names) == 1
    assert names.pop().startswith(f"{unique}.")
