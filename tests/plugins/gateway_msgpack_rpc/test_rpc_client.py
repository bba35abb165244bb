"""Equipment that is itself an RPC server: the gateway connects to it and calls ``command``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand
from gateway.testing import running, wait_until
from gateway_msgpack_rpc.binding import EquipmentOffline
from gateway_msgpack_rpc.device import CommandServer, RpcEquipmentServer
from gateway_msgpack_rpc.protocol import RpcError
from gateway_msgpack_rpc.testing import RecordingSink, rpc_binding, rpc_driver, rpc_gateway

pytestmark = pytest.mark.anyio

PRESS = "com.example.press.v1"


def command(attempt: int = 1) -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id=f"J1:press:{attempt}",
        type=PRESS,
        equipment="press",
        scope="cell1",
        job_order_id="J1",
        action="press",
        parameters={"force_kn": 12},
    )


@dataclass
class Press:
    """An equipment server's behaviour: answers in the call result unless told otherwise."""

    received: list[CloudEvent] = field(default_factory=list)
    hold: anyio.Event | None = None  # set: wait for it before answering
    failure: RpcError | None = None

    async def __call__(self, command: CloudEvent) -> Sequence[CloudEvent]:
        self.received.append(command)
        if self.hold is not None:
            await self.hold.wait()
        if self.failure is not None:
            raise self.failure
        return [command.reply(source="urn:press", data={"force_kn": 12.1})]


@asynccontextmanager
async def press_station(
    behaviour: CommandServer, **settings: str
) -> AsyncIterator[tuple[Gateway, RecordingSink, RpcEquipmentServer]]:
    async with RpcEquipmentServer.serve(behaviour) as server:
        gateway = rpc_gateway(
            settings={
                "port": "0",
                "equipment": f"press=127.0.0.1:{server.port}",
                "reconnect_min_seconds": "0.05",
                "reconnect_max_seconds": "0.2",
                **settings,
            }
        )
        sink = RecordingSink()
        gateway.equipment.attach(sink)
        async with running(gateway):
            await wait_until(lambda: rpc_binding(gateway).is_connected("press"))
            yield gateway, sink, server


async def test_the_call_result_carries_the_reply() -> None:
    press = Press()
    async with press_station(press) as (gateway, sink, _):
        driver = rpc_driver(gateway)
        assert driver.serves(command())
        assert driver.liveness.is_online("press")
        await gateway.equipment.send(command())
        await wait_until(lambda: sink.replies)
    (sent,) = press.received
    assert sent.correlationid == "J1:press:1"
    assert sent.data["parameters"] == {"force_kn": 12}
    (reply,) = sink.replies
    assert (reply.correlation_id, reply.data, reply.error) == (
        "J1:press:1",
        {"force_kn": 12.1},
        None,
    )


async def test_an_error_response_is_the_commands_failure() -> None:
    press = Press(failure=RpcError("interlock", "guard door open"))
    async with press_station(press) as (gateway, sink, _):
        await gateway.equipment.send(command())
        await wait_until(lambda: sink.replies)
    assert sink.replies[0].error == "interlock: guard door open"
    assert sink.replies[0].correlation_id == "J1:press:1"


async def test_the_equipment_may_publish_back_over_the_gateways_connection() -> None:
    async def accept_only(command: CloudEvent) -> Sequence[CloudEvent]:
        return []

    async with press_station(accept_only) as (_, sink, server):
        await server.publish(CloudEvent(type="com.example.press.done.v1", source="urn:press"))
        await wait_until(lambda: sink.events)
    assert sink.events[0].equipment == "press"


async def test_a_request_gets_its_reply_from_the_call_result() -> None:
    async with press_station(Press()) as (gateway, sink, _):
        event = CloudEvent(type=PRESS, source=gateway.source)
        reply = await rpc_binding(gateway).request("press", event, timeout=5)
    assert reply.data == {"force_kn": 12.1}
    assert sink.replies == []


async def test_equipment_that_vanishes_mid_command_gets_no_invented_reply_and_no_resend() -> None:
    hold = anyio.Event()
    press = Press(hold=hold)
    async with press_station(press) as (gateway, sink, server):
        driver = rpc_driver(gateway)
        with anyio.fail_after(1):
            await gateway.equipment.send(command(1))  # returns once written, not when answered
        await wait_until(lambda: press.received)
        await server.abort_connections()
        await wait_until(lambda: not driver.liveness.is_online("press"))
        # The gateway reconnects; the command is not sent again behind the engine's back.
        await wait_until(lambda: driver.liveness.is_online("press"))
        hold.set()
        await anyio.sleep(0.2)
        assert [c.correlationid for c in press.received] == ["J1:press:1"]
        assert sink.replies == []
        await gateway.equipment.send(command(2))  # the engine's retry
        await wait_until(lambda: sink.replies)
    assert [reply.correlation_id for reply in sink.replies] == ["J1:press:2"]


async def test_unreachable_equipment_is_offline_and_commands_fail_fast() -> None:
    async with RpcEquipmentServer.serve(Press()) as server:
        port = server.port  # closed below: nothing listens there any more
    gateway = rpc_gateway(settings={"port": "0", "equipment": f"press=127.0.0.1:{port}"})
    gateway.equipment.attach(RecordingSink())
    async with running(gateway):
        driver = rpc_driver(gateway)
        assert driver.serves(command())
        with anyio.fail_after(1), pytest.raises(EquipmentOffline, match="never connected"):
            await gateway.equipment.send(command())


async def test_an_equipment_server_stays_online_in_the_hub_while_connected() -> None:
    """It sends no heartbeats: the open connection is renewed in the hub (every third of the
    heartbeat timeout), and its end takes the equipment offline at once."""
    async with RpcEquipmentServer.serve(Press()) as server:
        gateway = rpc_gateway(
            settings={
                "port": "0",
                "equipment": f"press=127.0.0.1:{server.port}",
                "heartbeat_timeout_seconds": "0.3",
                "reconnect_min_seconds": "5",
            }
        )
        gateway.equipment.attach(RecordingSink())
        hub = gateway.equipment
        async with running(gateway):
            await wait_until(lambda: rpc_binding(gateway).is_connected("press"))
            assert hub.tracks("press")
            await anyio.sleep(0.7)  # more than twice the time a renewal counts for
            assert (await hub.liveness("press")).online
            await server.abort_connections()
            await wait_until(lambda: not rpc_binding(gateway).is_connected("press"))
            state = await hub.liveness("press")
            assert not state.online
            assert state.gone_reason is not None
            assert state.gone_reason.startswith("disconnected (")
