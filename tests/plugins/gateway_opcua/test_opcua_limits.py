"""Hostile OPC UA calls from a logged-in client: arguments over opcua.max_argument_bytes are
refused (BadRequestTooLarge) and nothing is stored; a message over opcua.max_message_bytes
never reaches the server's memory and the session goes on; ReturnStatus is a UInt64, as the
methods declare (a real asyncua client, SignAndEncrypt)."""

from __future__ import annotations

import anyio
import pytest
from asyncua import ua

from gateway.jobmethods import JobMethod
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import job_order
from gateway_opcua.convert import from_json, ua_type
from gateway_opcua.testing import OpcStation

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def order_with_description(job: str, size: int) -> ua.Variant:
    order = job_order(job, work_masters=["WM"], Description=[{"Text": "x" * size}])
    return ua.Variant(from_json(order, ua_type("ISA95JobOrderDataType"), "JobOrder"))


async def test_oversize_arguments_are_refused_and_nothing_is_stored(
    opc_station: OpcStation,
) -> None:
    no_comment = ua.Variant([], ua.VariantType.LocalizedText)
    async with opc_station.client() as client:
        result = await client.raw_call(
            JobMethod.STORE, order_with_description("BIG", 2 * 1024 * 1024), no_comment
        )
        assert result.StatusCode.value == ua.StatusCodes.BadRequestTooLarge
        with pytest.raises(Exception):  # noqa: B017,PT011 - refused by the transport limits
            await client.raw_call(
                JobMethod.STORE, order_with_description("HUGE", 60 * 1024 * 1024), no_comment
            )
    async with opc_station.client() as client:  # the server goes on
        assert (await client.job_response("BIG"))[0] == ReturnStatus.UNKNOWN_JOB_ORDER_ID
        assert (await client.job_response("HUGE"))[0] == ReturnStatus.UNKNOWN_JOB_ORDER_ID


async def test_return_status_is_a_uint64(opc_station: OpcStation) -> None:
    async with opc_station.client() as client:
        result = await client.raw_call(
            JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID, ua.Variant("NOPE")
        )
    assert result.OutputArguments[-1].VariantType == ua.VariantType.UInt64


async def test_connections_beyond_the_cap_are_closed_at_once(opc_station: OpcStation) -> None:
    """opcua.max_connections (64) idle connections held: each one more is closed by the server
    at once (asyncua's own default would take 1,000); once they go, a client logs in."""
    host, port = opc_station.endpoints[0].removeprefix("opc.tcp://").split(":")
    held = [await anyio.connect_tcp(host, int(port)) for _ in range(64)]
    try:
        refused = 0
        for _ in range(10):
            extra = await anyio.connect_tcp(host, int(port))
            async with extra:
                with anyio.fail_after(5):
                    try:
                        await extra.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        refused += 1
        assert refused == 10
    finally:
        for stream in held:
            await stream.aclose()
    async with opc_station.client() as client:
        assert (await client.job_response("NOPE"))[0] == ReturnStatus.UNKNOWN_JOB_ORDER_ID
