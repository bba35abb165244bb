"""H3: nothing an equipment login sends makes the gateway publish on another peer's topics.

The tightener (its own broker login, the shipped ACL) sends, on the topics the gateway reads
from it, a malformed message, an event and a reply to no command, each with an MQTT v5
Response Topic naming the positioner's command topic or a retained MES topic. The gateway
handles each (its drop counter says so) and publishes nothing there, while the MES is answered.
The MES's own commands get their replies only under the MES reply prefix.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import to_mqtt
from gateway.testing import poll_until
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import return_status
from tests.security.station import (
    EQUIPMENT_PREFIX,
    PREFIX,
    HostileStation,
    forged_reply_topic_event,
    probing,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_equipment_cannot_aim_the_gateways_replies(hostile_station: HostileStation) -> None:
    station = hostile_station
    await station.start()
    deployment = station.deployment
    victims = [
        f"{EQUIPMENT_PREFIX}/positioner/commands",
        f"{PREFIX}/{station.scope}/state-index",
        f"{PREFIX}/{station.scope}/events",
    ]
    attacks = []
    for victim in victims:
        for kind in ("events", "replies", "heartbeat"):
            topic = f"{EQUIPMENT_PREFIX}/tightener/{kind}"
            attacks.append(forged_reply_topic_event(topic, victim))
            stray = CloudEvent(
                type="com.example.tightened.v1",
                source="urn:tightener",
                subject=station.scope,
                correlationid="NOJOB:tighten:1",
                data={"torque": 1},
            )
            attacks.append(
                dataclasses.replace(
                    to_mqtt(stray, topic), response_topic=victim, correlation_data=b"x"
                )
            )
    async with (
        probing(station),
        deployment.client("positioner") as positioner,
        positioner.watch(victims[0]) as commands,
        deployment.client("mes") as mes,
        mes.watch(f"{PREFIX}/{station.scope}/#") as mes_topics,
        deployment.client("tightener") as tightener,
    ):
        for message in attacks:
            await tightener.publish(message)
        # Each was handled and its reply dropped (never published: the two are exclusive).
        malformed = sum(1 for message in attacks if message.correlation_data == b"forged")
        await poll_until(lambda: _dropped_at_least(station, malformed), timeout=10, interval=0.2)
        assert _nothing(commands)
        forged = [m for m in _drain(mes_topics) if m.correlation_data in (b"forged", b"x")]
        assert forged == []
    assert "Response Topic" in station.log_text()


async def _dropped_at_least(station: HostileStation, count: int) -> bool:
    return await station.metric("gateway_mqtt_replies_dropped_total") >= count


def _nothing(stream: object) -> bool:
    return _drain(stream) == []


def _drain(stream: object) -> list:  # type: ignore[type-arg]
    received = []
    while True:
        try:
            received.append(stream.receive_nowait())  # type: ignore[attr-defined]
        except (anyio.WouldBlock, anyio.EndOfStream):
            return received


async def test_the_mes_gets_replies_only_under_its_reply_prefix(
    hostile_station: HostileStation,
) -> None:
    """A command asking for its reply elsewhere (here: another equipment's command topic) is
    handled but not answered there; under mes/replies it is answered."""
    station = hostile_station
    await station.start()
    deployment = station.deployment
    query = CloudEvent(
        type="org.opcfoundation.Machinery.Jobs.RequestJobResponseByJobOrderID.v1",
        source="urn:mes",
        subject=station.scope,
        data={"JobOrderID": "NOPE"},
    )
    commands = f"{PREFIX}/{station.scope}/commands"
    async with (
        deployment.client("positioner") as positioner,
        positioner.watch(f"{EQUIPMENT_PREFIX}/positioner/commands") as seen,
        station.mes() as mes,
    ):
        aimed = dataclasses.replace(
            to_mqtt(query, commands),
            response_topic=f"{EQUIPMENT_PREFIX}/positioner/commands",
            correlation_data=b"aimed",
        )
        await mes.client.publish(aimed)
        await poll_until(lambda: _dropped_at_least(station, 1), timeout=10, interval=0.2)
        answer = await mes.job_response("NOPE")
        assert return_status(answer) == ReturnStatus.UNKNOWN_JOB_ORDER_ID
        assert _nothing(seen)
