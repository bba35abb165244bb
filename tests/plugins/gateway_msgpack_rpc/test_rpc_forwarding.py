"""A command for equipment connected to another instance travels there through the store."""

from __future__ import annotations

import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand
from gateway.errors import GatewayError
from gateway.testing import running, wait_until
from gateway.testing.services import free_port
from gateway_msgpack_rpc.device import RpcDevice
from gateway_msgpack_rpc.testing import rpc_binding, rpc_driver

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def instance(redis_url: str, unique: str, name: str) -> Gateway:
    environ = {
        "GATEWAY_PLUGINS_ALLOW": "redis,msgpack-rpc",
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": unique,
        "GATEWAY_GATEWAY_INSTANCE_ID": f"{unique}-{name}",
        "GATEWAY_MSGPACK_RPC_PORT": str(free_port()),
    }
    return Gateway.from_environment(None, environ)


def tighten(job: str) -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id=f"{job}:tighten:1",
        type="com.example.tighten.v1",
        equipment="tool",
        scope="cell",
        job_order_id=job,
        action="tighten",
        parameters={"torque_spec": "85Nm"},
    )


async def test_an_instance_without_the_connection_forwards_to_the_one_with_it(
    redis_url: str, unique: str
) -> None:
    a, b = instance(redis_url, unique, "a"), instance(redis_url, unique, "b")
    received: list[CloudEvent] = []

    async def on_command(command: CloudEvent) -> None:
        received.append(command)

    async with running(a), running(b):
        port = rpc_binding(a).address[1]  # type: ignore[index]
        forwarding = rpc_driver(b).forwarding
        assert forwarding is not None
        async with RpcDevice.connect("127.0.0.1", port, "tool", on_command=on_command):
            await wait_until(lambda: forwarding.owner_of("tool") == a.instance_id)
            await b.equipment.send(tighten("J1"))  # b has no connection to the tool
            await wait_until(lambda: received)
        assert received[0].correlationid == "J1:tighten:1"
        assert forwarding.forwarded == 1
        # The tool is gone: nobody owns it any more, and b says so instead of forwarding.
        await wait_until(lambda: forwarding.owner_of("tool") is None)
        with pytest.raises(GatewayError):
            await b.equipment.send(tighten("J2"))
