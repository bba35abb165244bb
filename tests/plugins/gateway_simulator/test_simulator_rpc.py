"""Simulated devices speaking MessagePack-RPC: they connect to the gateway's RPC server, answer
commands (idempotently), publish their events and stay online in the hub.

No broker and no store: the gateway runs only the MessagePack-RPC and simulator plugins, with a
recording sink instead of a recipe engine. The SFC engine drives them in ``tests/e2e``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand
from gateway.errors import SettingsError
from gateway.testing import running, wait_until
from gateway.testing.services import free_port
from gateway_mqtt_equipment import MqttEquipmentDriver
from gateway_msgpack_rpc import MsgpackRpcBinding, RpcDevice
from gateway_msgpack_rpc.auth import token_digest
from gateway_msgpack_rpc.testing import RecordingSink
from gateway_simulator.links import MqttDeviceLink, RpcDeviceLink
from gateway_simulator.service import SimulatorService

pytestmark = pytest.mark.anyio

TYPES = "com.example.station"
TIGHTEN = f"{TYPES}.tighten.v1"
POSITION = f"{TYPES}.position.v1"
TORQUE_RESULT = f"{TYPES}.torque_result.v1"
QA_RESULT = f"{TYPES}.qa_result.v1"


def simulator_gateway(
    *,
    allow: str = "msgpack-rpc,simulator",
    port: int | None = None,
    rpc: dict[str, str] | None = None,
    **simulator: str,
) -> Gateway:
    """A gateway with its RPC server on a free port and the simulator on (fast, seeded)."""
    settings = {
        "enabled": "true",
        "rpc_devices": "positioner,tightener,camera",
        "position_seconds": "0.01",
        "tighten_seconds": "0.01",
        "inspect_seconds": "0.01",
        "seed": "3",
        **simulator,
    }
    environ = {
        "GATEWAY_PLUGINS_ALLOW": allow,
        "GATEWAY_GATEWAY_INSTANCE_ID": "sim-rpc-test",
        "GATEWAY_MSGPACK_RPC_PORT": str(free_port() if port is None else port),
        **{f"GATEWAY_SIMULATOR_{key.upper()}": value for key, value in settings.items()},
        **{f"GATEWAY_MSGPACK_RPC_{key.upper()}": value for key, value in (rpc or {}).items()},
    }
    return Gateway.from_environment(None, environ)


def simulator_of(gateway: Gateway) -> SimulatorService:
    [service] = [s for s in gateway.services if isinstance(s, SimulatorService)]
    return service


@asynccontextmanager
async def rpc_station() -> AsyncIterator[tuple[Gateway, RecordingSink]]:
    gateway = simulator_gateway()
    sink = RecordingSink()
    gateway.equipment.attach(sink)
    async with running(gateway):
        yield gateway, sink


def command(type: str, equipment: str, correlation_id: str, **parameters: Any) -> EquipmentCommand:
    job = correlation_id.split(":")[0]
    return EquipmentCommand(
        correlation_id=correlation_id,
        type=type,
        equipment=equipment,
        scope="cell1",
        job_order_id=job,
        action=correlation_id.split(":")[1],
        parameters=parameters,
        timeout_seconds=10,
    )


async def test_rpc_devices_connect_to_the_gateways_own_server_and_are_online() -> None:
    async with rpc_station() as (gateway, _):
        links = simulator_of(gateway).links
        assert all(isinstance(link, RpcDeviceLink) for link in links)
        binding = gateway.binding("msgpack-rpc")
        assert isinstance(binding, MsgpackRpcBinding)
        for name in ("positioner", "tightener", "camera"):
            assert binding.is_connected(name)
            assert (await gateway.equipment.liveness(name)).online
        assert not [d for d in gateway.equipment.drivers if d.name == "simulator"]


async def test_rpc_devices_prove_their_names_with_their_tokens(tmp_path: Path) -> None:
    tokens = {"positioner": "p-token", "tightener": "t-token", "camera": "c-token"}
    listed = tmp_path / "device-tokens"
    listed.write_text("".join(f"{name} {token_digest(t)}\n" for name, t in tokens.items()))
    gateway = simulator_gateway(
        rpc={"device_auth": "token", "device_tokens_file": str(listed)},
        rpc_tokens=",".join(f"{name}={token}" for name, token in tokens.items()),
    )
    sink = RecordingSink()
    gateway.equipment.attach(sink)
    async with running(gateway):
        binding = gateway.binding("msgpack-rpc")
        assert isinstance(binding, MsgpackRpcBinding)
        await wait_until(lambda: all(binding.is_connected(name) for name in tokens))
        await gateway.equipment.send(command(POSITION, "positioner", "J1:position:1"))
        await wait_until(lambda: sink.replies)
    assert sink.replies[0].equipment == "positioner"
    assert sink.replies[0].error is None


async def test_a_tightening_over_rpc_is_answered_and_reported_once_per_correlation_id() -> None:
    async with rpc_station() as (gateway, sink):
        tighten = command(TIGHTEN, "tightener", "J1:tighten:1", torque_spec="60 Nm")
        await gateway.equipment.send(tighten)
        await wait_until(lambda: sink.replies and sink.events)
        await gateway.equipment.send(tighten)  # a re-sent command (same correlation id)
        await wait_until(lambda: len(sink.replies) == 2)
        # Worked out once, repeated once: a device emits events only while working a command
        # out, so there is no second torque result to wait for.
        device = simulator_of(gateway).station.devices["tightener"]
    first, again = sink.replies
    assert first == again
    assert first.correlation_id == "J1:tighten:1"
    assert first.error is None
    assert first.data["setpoint"] == 60.0
    assert first.scope == "cell1"
    [event] = sink.events
    assert (event.type, event.equipment, event.job_order_id) == (TORQUE_RESULT, "tightener", "J1")
    assert event.data == first.data
    assert (device.handled, device.repeated) == (1, 1)


async def test_a_positioned_part_is_inspected_by_the_rpc_camera() -> None:
    async with rpc_station() as (gateway, sink):
        await gateway.equipment.send(command(POSITION, "positioner", "J2:position:1"))
        await wait_until(lambda: sink.replies and sink.events)
    assert sink.replies[0].data["in_position"] is True
    [qa] = sink.events
    assert (qa.type, qa.equipment, qa.scope, qa.job_order_id) == (
        QA_RESULT,
        "camera",
        "cell1",
        "J2",
    )
    assert qa.data == {"passed": True, "defects": 0, "image": "sim://camera/J2.png"}


async def test_a_command_a_device_does_not_know_fails_with_its_error() -> None:
    async with rpc_station() as (gateway, sink):
        await gateway.equipment.send(command(TIGHTEN, "camera", "J3:inspect:1"))
        await wait_until(lambda: sink.replies)
    assert sink.replies[0].error == (
        f"unknown-command: camera QA station camera does not know {TIGHTEN!r}"
    )


async def test_an_rpc_device_reconnects_when_its_connection_ends() -> None:
    async with rpc_station() as (gateway, sink):
        port = gateway.settings.section("msgpack_rpc").port
        # An impostor takes the tightener's name: the gateway closes the device's connection
        # (the newest wins), the device connects again and so closes the impostor's.
        async with RpcDevice.connect("127.0.0.1", port, "tightener", heartbeat_seconds=0) as other:
            await wait_until(lambda: other.connection.finished)
        await gateway.equipment.send(command(TIGHTEN, "tightener", "J4:tighten:1"))
        await wait_until(lambda: sink.replies)
    assert sink.replies[0].error is None
    assert sink.replies[0].correlation_id == "J4:tighten:1"


# -- configuration -------------------------------------------------------------------------


def test_rpc_devices_are_left_out_of_the_simulators_mqtt_driver() -> None:
    gateway = simulator_gateway(allow="mqtt,msgpack-rpc,simulator", rpc_devices="tightener")
    [driver] = [d for d in gateway.equipment.drivers if d.name == "simulator"]
    assert isinstance(driver, MqttEquipmentDriver)
    assert driver.equipment == {"positioner", "camera"}
    links = {link.device.name: link for link in simulator_of(gateway).links}
    assert isinstance(links["tightener"], RpcDeviceLink)
    assert isinstance(links["positioner"], MqttDeviceLink)


def test_rpc_devices_connect_to_the_gateways_rpc_server_unless_told_otherwise() -> None:
    own = simulator_gateway(port=47001)
    link = simulator_of(own).links[0]
    assert isinstance(link, RpcDeviceLink)
    assert (link.host, link.port) == ("127.0.0.1", 47001)
    elsewhere = simulator_gateway(port=0, rpc_host="10.0.0.7", rpc_port="47002")
    link = simulator_of(elsewhere).links[0]
    assert isinstance(link, RpcDeviceLink)
    assert (link.host, link.port) == ("10.0.0.7", 47002)


def test_rpc_devices_without_an_rpc_server_stop_start_up() -> None:
    with pytest.raises(SettingsError, match=r"simulator\.rpc_port"):
        simulator_gateway(port=0)


def test_an_rpc_device_must_be_a_simulated_device() -> None:
    with pytest.raises(SettingsError, match="rpc_devices: 'welder' is not a simulated device"):
        simulator_gateway(rpc_devices="welder")
