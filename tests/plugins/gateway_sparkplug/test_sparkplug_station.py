"""The simulated station as a Sparkplug host sees it, over real mosquitto and Redis.

The MES runs the rear-axle recipe on the simulated station (positioner and camera over MQTT,
the tightener a separate controller over MessagePack-RPC); a Sparkplug host written in the
test follows ``spBv1.0/#``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.codecs.mqtt import MqttMessage
from gateway.testing import running, wait_until
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import free_port
from gateway_jobs.testing import JobsMes, final_response, store_and_start
from gateway_jobs.testing import state_texts as states
from gateway_sfc.model import DATASCHEMA
from gateway_simulator.testing import fast_devices, station_environ
from gateway_sparkplug.service import SparkplugService
from gateway_sparkplug.topics import state_topic
from tests.plugins.gateway_sparkplug.conftest import Host, sparkplug_host

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

REAR_AXLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json").read_text()
)
SCOPE = "cell1"
EQUIPMENT = ("camera", "positioner", "tightener")


class Station:
    def __init__(self, mqtt_url: str, redis_url: str, name: str) -> None:
        self.mqtt_url, self.redis_url, self.name = mqtt_url, redis_url, name
        self.rpc_port = free_port()

    def gateway(
        self, instance: str = "a", sparkplug: dict[str, str] | None = None, **simulator: str
    ) -> Gateway:
        """An instance with the Sparkplug mirror on (``sparkplug``: more of its settings); the
        tightener is a remote RPC device."""
        settings = fast_devices(
            f"{self.name}-sim", **{"rpc_devices": "", "tightener": "", **simulator}
        )
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance=instance,
            simulator=settings,
            extra={
                "GATEWAY_MSGPACK_RPC_PORT": str(self.rpc_port),
                "GATEWAY_SPARKPLUG_ENABLED": "true",
                "GATEWAY_SPARKPLUG_GROUP_ID": self.name,
                "GATEWAY_SPARKPLUG_SCOPES": SCOPE,
                "GATEWAY_SPARKPLUG_EQUIPMENT": ",".join(EQUIPMENT),
                "GATEWAY_SPARKPLUG_POLL_SECONDS": "0.1",
                **{f"GATEWAY_SPARKPLUG_{k.upper()}": v for k, v in (sparkplug or {}).items()},
            },
        )
        return Gateway.from_environment(None, environ)

    def tightener(self) -> Gateway:
        """The tightening controller, a simulator of its own connected over RPC; it takes its
        time (0.5 s), so the host sees it busy whatever the machine's load."""
        settings = fast_devices(
            f"{self.name}-sim",
            positioner="",
            camera="",
            rpc_devices="tightener",
            rpc_port=str(self.rpc_port),
            tighten_seconds="0.5",
        )
        environ = station_environ(
            mqtt_url=self.mqtt_url,
            redis_url=self.redis_url,
            name=self.name,
            instance="tightener",
            role="simulator",
            simulator=settings,
            extra={"GATEWAY_MSGPACK_RPC_PORT": "0"},
        )
        return Gateway.from_environment(None, environ)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


def born(host: Host) -> bool:
    devices = {m.device for m in host.of_kind("DBIRTH")}
    return bool(host.of("NBIRTH", SCOPE)) and {"Jobs", *EQUIPMENT} <= devices


async def test_a_host_sees_births_the_running_slot_and_equipment_going_offline(
    station: Station, spb: ModuleType
) -> None:
    async with sparkplug_host(station.mqtt_url, spb, station.name) as host:
        async with running(station.gateway()), running(station.tightener()) as tightener:
            await host.wait(lambda: born(host) and host.tags[(SCOPE, "tightener")]["Online"])
            kinds = [m.kind for m in host.messages]
            assert kinds[0] == "NBIRTH"
            nbirth = host.of("NBIRTH", SCOPE)[0].metrics
            assert nbirth["Node Control/Rebirth"] is False
            assert nbirth["Scope/Online"] is True
            assert nbirth["Queue/MaxRunningJobOrders"] == 1
            assert nbirth["Queue/RunningCount"] == 0
            assert nbirth["Properties/Gateway Version"]
            jobs = host.of("DBIRTH", SCOPE, "Jobs")[0].metrics
            assert jobs["Running/1/JobOrderID"] == ""

            async with connect_test_client(station.mqtt_url) as client:
                mes = JobsMes(client, station.name, SCOPE)
                await store_and_start(mes, REAR_AXLE, "J1", dataschema=DATASCHEMA)

                def tightener_busy() -> tuple[str, str, str]:
                    tags = host.tags[(SCOPE, "tightener")]
                    return tags["CurrentJob"], tags["CurrentStep"], tags["CurrentAction"]

                await host.wait(lambda: tightener_busy() == ("J1", "TightenBolts", "tighten"))
                response = await final_response(mes, "J1")
            assert states(response)[:2] == ["Ended", "Completed"]
            await host.wait(
                lambda: host.tags[(SCOPE, "Jobs")]["Running/1/State"] == "Ended.Completed"
            )
            slot = host.history(SCOPE, "Jobs", "Running/1/State")
            assert slot[0] == ""  # the empty slot at birth
            assert [state.partition(".")[0] for state in _distinct(slot[1:])] == [
                "AllowedToStart",
                "Running",
                "Ended",
            ]
            assert host.tags[(SCOPE, "Jobs")]["Running/1/JobOrderID"] == "J1"
            assert host.tags[(SCOPE, "Jobs")]["Running/1/StateNumber"] == 5
            assert host.tags[(SCOPE, "tightener")]["LastCommandType"] == (
                "com.example.station.tighten.v1"
            )
            assert host.tags[(SCOPE, "camera")]["LastEventType"] == (
                "com.example.station.qa_result.v1"
            )
            # Recorded by the instance that got the reply, read at the next poll.
            await host.wait(lambda: host.tags[(SCOPE, "tightener")]["LastResultStatus"] == "Good")
            assert host.tags[(SCOPE, "positioner")]["LastCommandType"]

            def tightener_kinds(since: int) -> list[str]:
                return [m.kind for m in host.messages[since:] if m.device == "tightener"]

            # The tightening controller goes away: DDEATH.
            mark = len(host.messages)
            tightener.request_stop("test: the controller goes away")
            await host.wait(lambda: "DDEATH" in tightener_kinds(mark))
            # A host's NCMD Rebirth: NBIRTH (seq 0, same bdSeq) and every DBIRTH again, the
            # dead tightener's followed by its DDEATH (a host shows its last values, stale).
            mark = len(host.messages)
            await host.client.publish(host.rebirth(SCOPE))
            await host.wait(lambda: "DDEATH" in tightener_kinds(mark))
            first = host.of("NBIRTH", SCOPE)[0]
            again = next(m for m in host.messages[mark:] if m.kind == "NBIRTH")
            assert (again.seq, again.metrics["bdSeq"]) == (0, first.metrics["bdSeq"])
            reborn = {m.device for m in host.messages[mark:] if m.kind == "DBIRTH"}
            assert reborn == {"Jobs", *EQUIPMENT}
            assert tightener_kinds(mark) == ["DBIRTH", "DDEATH"]
            # The controller comes back: a DBIRTH, online.
            mark = len(host.messages)
            async with running(station.tightener()):
                await host.wait(lambda: "DBIRTH" in tightener_kinds(mark))
            back = next(m for m in host.messages[mark:] if m.device == "tightener")
            assert (back.kind, back.metrics["Online"]) == ("DBIRTH", True)
        # The gateway stops: its NDEATH, with the NBIRTH's bdSeq.
        await host.wait(lambda: bool(host.of("NDEATH", SCOPE)))
        assert host.of("NDEATH", SCOPE)[0].metrics["bdSeq"] == first.metrics["bdSeq"]
    assert host.seq_errors == []


def _distinct(values: list[Any]) -> list[Any]:
    """``values`` without immediate repetitions."""
    return [value for i, value in enumerate(values) if i == 0 or values[i - 1] != value]


async def test_births_wait_for_the_primary_host_and_its_going_offline_ends_the_term(
    station: Station, spb: ModuleType
) -> None:
    host_id = f"{station.name}-scada"
    gateway = station.gateway(sparkplug={"primary_host_id": host_id})

    def state(online: bool) -> MqttMessage:
        document = {"online": online, "timestamp": 1}
        return MqttMessage(topic=state_topic(host_id), payload=json.dumps(document).encode())

    async with sparkplug_host(station.mqtt_url, spb, station.name) as host, running(gateway):
        speakers = gateway.state.get(SparkplugService).speakers
        await wait_until(lambda: SCOPE in speakers and speakers[SCOPE].awaiting_host)
        assert host.messages == []  # connected, lease held: silent until the host is online
        await host.client.publish(state(True))
        await host.wait(lambda: bool(host.of("NBIRTH", SCOPE)))
        first = host.of("NBIRTH", SCOPE)[0].metrics["bdSeq"]
        await host.client.publish(state(False))
        await host.wait(lambda: bool(host.of("NDEATH", SCOPE)))
        assert host.of("NDEATH", SCOPE)[0].metrics["bdSeq"] == first
        await wait_until(lambda: speakers[SCOPE].awaiting_host)
        await host.client.publish(state(True))
        await host.wait(lambda: len(host.of("NBIRTH", SCOPE)) == 2)
        assert host.of("NBIRTH", SCOPE)[1].metrics["bdSeq"] != first
    assert host.seq_errors == []


async def test_a_rebirth_by_alias_is_answered_other_commands_are_ignored_and_counted(
    station: Station, spb: ModuleType
) -> None:
    gateway = station.gateway()
    async with sparkplug_host(station.mqtt_url, spb, station.name) as host, running(gateway):
        await host.wait(lambda: born(host))
        speaker = gateway.state.get(SparkplugService).speakers[SCOPE]
        ncmd = f"spBv1.0/{station.name}/NCMD/{SCOPE}"
        await host.client.publish(MqttMessage(topic=ncmd, payload=b"\xff\xff not protobuf"))
        other = spb.Payload(timestamp=1)
        other.metrics.add(name="Scope/Online", datatype=11, boolean_value=False)
        await host.client.publish(MqttMessage(topic=ncmd, payload=other.SerializeToString()))
        await wait_until(lambda: speaker.ignored_commands == 2)
        [alias] = [a for (node, a), name in host.aliases.items() if name == "|Node Control/Rebirth"]
        by_alias = spb.Payload(timestamp=1)
        by_alias.metrics.add(alias=alias, datatype=11, boolean_value=True)
        await host.client.publish(MqttMessage(topic=ncmd, payload=by_alias.SerializeToString()))
        await host.wait(lambda: len(host.of("NBIRTH", SCOPE)) == 2)
        exposition = (await gateway.metrics.render()).decode()
    assert host.tags[(SCOPE, None)]["Scope/Online"] is True  # the mirror is read-only
    assert 'gateway_sparkplug_messages_total{type="NBIRTH"} 2.0' in exposition
    assert "gateway_sparkplug_rebirths_total 1.0" in exposition
    assert 'gateway_sparkplug_speaking{scope="cell1"} 1.0' in exposition
    assert host.seq_errors == []
