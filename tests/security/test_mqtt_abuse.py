"""M3 and H4: an MQTT login cannot blow up the gateway's memory, nor silently steal its session.

- Three 60 MB publishes from the tightener on a topic the gateway reads: the shipped broker
  (``max_packet_size``) refuses them, the gateway's memory does not grow by 50 MB, the MES is
  answered meanwhile.
- A login knows the gateway's instance id (it names the gateway's reply topic) but cannot make
  the client id of its sessions from it (a tag made from the gateway's password): no takeover.
- A login that learnt the gateway's client id takes its session over: the gateway says
  so loudly (an ERROR naming the cause, a counter), and does not fight back at once (its next
  connection comes only after ``mqtt.reconnect_max_seconds``).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gateway.codecs.mqtt import MqttMessage
from gateway.settings import Secret
from gateway.testing import poll_until
from gateway_mqtt.settings import MqttSettings, session_client_id
from tests.security.station import EQUIPMENT_PREFIX, HostileStation, probing

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

HUGE = 60 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_huge_publishes_never_reach_the_gateways_memory(
    hostile_station: HostileStation,
) -> None:
    station = hostile_station
    await station.start()
    assert station.process is not None
    assert station.process.process is not None
    pid = station.process.process.pid
    before = rss_bytes(pid)
    async with probing(station):
        message = MqttMessage(
            topic=f"{EQUIPMENT_PREFIX}/tightener/events", payload=b"x" * HUGE, qos=1
        )
        for _ in range(3):
            # The broker drops the connection of a client sending a packet over its limit.
            with pytest.raises(Exception):  # noqa: B017,PT011 - whichever the client library raises
                await publish_twice(station, message)
    assert rss_bytes(pid) - before < 50 * 1024 * 1024


async def publish_twice(station: HostileStation, message: MqttMessage) -> None:
    async with station.deployment.client("tightener") as tightener:
        with anyio.fail_after(30):
            await tightener.publish(message)
            await tightener.publish(message)


async def test_a_taken_over_session_is_said_loudly_and_not_fought_for(
    hostile_station: HostileStation,
) -> None:
    """The MES's login, having learnt the gateway's client id (from a broker log, say),
    connects with it again and again for a while (each connection kicks the gateway's session,
    the gateway's comeback kicks it): the gateway says so, and comes back only every
    mqtt.reconnect_max_seconds, not in a fight."""
    station = hostile_station
    station.environ["GATEWAY_MQTT_RECONNECT_MAX_SECONDS"] = "3"
    await station.start()
    thefts = 0
    learnt = gateway_client_id(station)

    async def steal() -> None:
        nonlocal thefts
        while True:
            try:
                async with station.deployment.client("mes", client_id=learnt):
                    thefts += 1
                    await anyio.sleep_forever()
            except Exception:
                continue

    async def until_reported() -> None:
        async def said() -> bool:
            return await station.metric("gateway_mqtt_sessions_taken_over_total") >= 1

        # However slow the machine, each theft is a kick: it is said after a few of them.
        await poll_until(said, timeout=60, interval=0.2)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(steal)
        await until_reported()
        # From now on the gateway comes back only every reconnect_max_seconds (3 s): in 8 s
        # of thefts at most a few comebacks. A fight would be one every 0.2 s: 40.
        before = await station.metric("gateway_transport_reconnects_total")
        await anyio.sleep(8)  # the length of the window counted, not a wait for something
        reconnects = await station.metric("gateway_transport_reconnects_total") - before
        tasks.cancel_scope.cancel()
    await poll_until(station.ready, timeout=20, interval=0.2)  # it holds on once left alone
    log = station.log_text()
    assert "TAKEN OVER" in log
    assert log.count("TAKEN OVER") <= 2  # once per interval, not once per kick
    assert reconnects <= 5, (reconnects, thefts)


def gateway_client_id(station: HostileStation, lane: str = "") -> str:
    password = Secret(station.deployment.passwords["gateway"])
    return session_client_id(MqttSettings(password=password), station.name, lane)


async def test_a_login_cannot_name_the_gateways_sessions_from_its_instance_id(
    hostile_station: HostileStation,
) -> None:
    """The instance id is in the gateway's reply topic, so every equipment login knows it; the
    session's client id also needs the gateway's password. Connecting with every id that can
    be made from the instance id alone takes no session over: the gateway never reconnects."""
    station = hostile_station
    await station.start()
    before = await station.metric("gateway_transport_reconnects_total")
    guesses = [f"gw-{station.name}{lane}" for lane in ("", "-mes")] + [station.name]
    assert gateway_client_id(station) not in guesses
    async with probing(station):
        for guess in guesses * 3:
            async with station.deployment.client("mes", client_id=guess):
                pass  # connected under that id: a session of its own, nobody else's
    assert await station.metric("gateway_transport_reconnects_total") == before
    assert await station.metric("gateway_mqtt_sessions_taken_over_total") == 0
