"""M1: a device on the RPC port cannot take the commands of equipment another driver serves.

The tightener is MQTT equipment. A device that connects to the RPC port and names itself
``tightener`` (even with a token the tokens file accepts for that id) is refused; the job's
command still goes to the tightener over MQTT, and its answer completes the job.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from gateway.codecs.mqtt import from_mqtt, to_mqtt
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import final_response, job_order, return_status, state_texts
from gateway_msgpack_rpc.device import RpcDevice
from gateway_msgpack_rpc.protocol import NOT_AUTHORIZED, RpcError
from tests.security.station import EQUIPMENT_PREFIX, RPC_TOKEN, HostileStation, probing

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_an_rpc_device_cannot_take_over_mqtt_equipment(
    hostile_station: HostileStation,
) -> None:
    station = hostile_station
    await station.start()
    async with (
        probing(station),
        station.deployment.client("tightener") as tightener,
        tightener.watch(f"{EQUIPMENT_PREFIX}/tightener/commands") as commands,
        station.mes() as mes,
    ):
        with pytest.raises(RpcError) as refused:
            async with RpcDevice.connect(
                "127.0.0.1", station.rpc_port, "tightener", token=RPC_TOKEN
            ):
                pass
        assert refused.value.code == NOT_AUTHORIZED
        assert "served by the mqtt-equipment driver" in str(refused.value)
        stored = await mes.store(job_order("J1", work_masters=["WM"]), method="StoreAndStart")
        assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data
        with anyio.fail_after(10):
            command = await commands.receive()
        reply = from_mqtt(command).reply(source="urn:tightener", data={"torque": 42})
        assert command.response_topic is not None
        await tightener.publish(
            dataclasses.replace(
                to_mqtt(reply, command.response_topic),
                correlation_data=command.correlation_data,
            )
        )
        ended = await final_response(mes, "J1")
    assert state_texts(ended)[:2] == ["Ended", "Completed"]
