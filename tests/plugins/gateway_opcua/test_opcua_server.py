"""The OPC UA server against an asyncua client: real Redis, mosquitto and the simulated station.

OPC 40001-3 Annex B.3 (Store, Start, the job runs to its end, RequestJobResponse, Clear) over
OPC UA; the same jobs over MQTT both ways; status events on an OPC UA subscription, also for
changes made on the other instance; argument errors as OPC UA status codes; logins refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ObjectReceiveStream
from asyncua import ua
from asyncua.ua.uaerrors import BadUserAccessDenied, UaError

from gateway.jobmethods import JobMethod
from gateway.testing import poll_until
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import job_order, return_status, state_texts, work_master
from gateway_opcua.convert import to_json
from gateway_opcua.model import ISA95_URI
from gateway_opcua.testing import PASSWORD, USER, OpcStation, client_certificate, connect
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

REAR_AXLE: dict[str, Any] = json.loads(
    (Path(__file__).parents[3] / "examples" / "recipes" / "rear_axle.json").read_text()
)
NO_COMMENT = ua.Variant([], ua.VariantType.LocalizedText)


async def configure_rear_axle(station: OpcStation) -> None:
    """The Work Master is station configuration: it arrives over MQTT, as from the MES."""
    async with station.mes() as mes:
        reply = await mes.configure(
            "workmaster", work_master("WM", REAR_AXLE, dataschema=DATASCHEMA)
        )
    assert return_status(reply) == ReturnStatus.NO_ERROR, reply.data


async def next_event(events: ObjectReceiveStream[Any], job: str) -> dict[str, Any]:
    """The next status event of ``job``, its fields in JSON."""
    with anyio.fail_after(30):
        while True:
            event = await events.receive()
            fields = {
                name: to_json(getattr(event, name, None))
                for name in ("JobOrder", "JobState", "JobResponse")
            }
            if fields["JobOrder"]["JobOrderID"] == job:
                return fields


def texts(states: list[dict[str, Any]]) -> list[str]:
    return [state["StateText"]["Text"] for state in states]


async def test_the_annex_b3_life_cycle_over_opc_ua(opc_station: OpcStation) -> None:
    await configure_rear_axle(opc_station)
    async with opc_station.client() as client, client.events() as events:
        assert await client.store(job_order("B3", work_masters=["WM"])) == ReturnStatus.NO_ERROR
        stored = await next_event(events, "B3")
        assert texts(stored["JobState"]) == ["NotAllowedToStart", "Ready"]
        assert stored["JobOrder"]["WorkMasterID"] == [{"ID": "WM"}]

        # The same job, over MQTT.
        async with opc_station.mes() as mes:
            reply = await mes.job_response("B3")
        assert state_texts(reply.data["JobResponse"]) == ["NotAllowedToStart", "Ready"]

        assert await client.act(JobMethod.START, "B3") == ReturnStatus.NO_ERROR
        seen = [texts((await next_event(events, "B3"))["JobState"]) for _ in range(2)]
        assert seen == [["AllowedToStart", "Ready"], ["Running"]]
        ended = await next_event(events, "B3")  # the simulated station ran the recipe
        assert texts(ended["JobState"]) == ["Ended", "Completed"]
        assert "JobResponseData" in ended["JobResponse"]

        status, response = await client.job_response("B3")
        assert status == ReturnStatus.NO_ERROR
        assert response is not None
        assert texts(response["JobState"]) == ["Ended", "Completed"]
        data = {entry["ID"]: entry.get("Value") for entry in response["JobResponseData"]}
        assert json.loads(data["camera_qa"])["passed"] is True  # an object: JSON text in OPC UA
        listed = {
            entry["JobOrder"]["JobOrderID"]: texts(entry["State"])
            for entry in await client.job_order_list()
        }
        assert listed["B3"] == ["Ended", "Completed"]

        assert await client.act(JobMethod.CLEAR, "B3") == ReturnStatus.NO_ERROR
        cleared = await next_event(events, "B3")
        assert texts(cleared["JobState"]) == ["EndState"]
        assert "B3" not in {
            entry["JobOrder"]["JobOrderID"] for entry in await client.job_order_list()
        }
        assert (await client.job_response("B3"))[0] == ReturnStatus.UNKNOWN_JOB_ORDER_ID


async def test_a_substates_browse_path_names_the_isa95_state_machine(
    opc_station: OpcStation,
) -> None:
    """``NotAllowedToStartSubstates/Ready`` resolves only in the ISA-95 namespace: a client
    that browses the path (UaExpert, node-opcua) gets BadNoMatch in namespace 0."""
    await configure_rear_axle(opc_station)
    async with opc_station.client() as client:
        assert await client.store(job_order("NS", work_masters=["WM"])) == ReturnStatus.NO_ERROR
        status, response = await client.raw_job_response("NS")
        assert status == ReturnStatus.NO_ERROR
        isa95 = await client.client.get_namespace_index(ISA95_URI)
        [top, substate] = response.JobState
        assert top.BrowsePath is None or not top.BrowsePath.Elements
        assert [element.TargetName for element in substate.BrowsePath.Elements] == [
            ua.QualifiedName("NotAllowedToStartSubstates", isa95),
            ua.QualifiedName("Ready", isa95),
        ]
        # and the JSON form a client reads back is the MQTT one: bare names
        _, document = await client.job_response("NS")
        assert document is not None
        path = document["JobState"][1]["BrowsePath"]["Elements"]
        assert [element["TargetName"] for element in path] == [
            "NotAllowedToStartSubstates",
            "Ready",
        ]


async def test_a_job_stored_over_mqtt_is_controlled_over_opc_ua_on_another_instance(
    opc_station: OpcStation,
) -> None:
    await configure_rear_axle(opc_station)
    async with opc_station.client(1) as client, client.events() as events, opc_station.mes() as mes:
        stored = await mes.store(job_order("MQ1", work_masters=["WM"]))
        assert return_status(stored) == ReturnStatus.NO_ERROR
        event = await next_event(events, "MQ1")  # made on instance a, seen on b's subscription
        assert texts(event["JobState"]) == ["NotAllowedToStart", "Ready"]
        assert "MQ1" in {entry["JobOrder"]["JobOrderID"] for entry in await client.job_order_list()}
        assert await client.act(JobMethod.CANCEL, "MQ1") == ReturnStatus.NO_ERROR
        assert texts((await next_event(events, "MQ1"))["JobState"]) == ["EndState"]
        gone = await mes.job_response("MQ1")
    assert return_status(gone) == ReturnStatus.UNKNOWN_JOB_ORDER_ID


async def test_job_order_control_shows_what_a_job_order_may_name(
    opc_station: OpcStation,
) -> None:
    """JobOrderControl's WorkMaster, allowed-ID variables and MaxDownloadableJobOrders show the
    scope's configuration as the MES sets it over MQTT, on every instance (scope cell2: its
    own configuration, so the job limit set here holds back no other test's jobs)."""
    drill = {
        "ID": "WM-drill",
        "Description": {"Locale": "en", "Text": "Drill the bores"},
        "Parameters": [{"ID": "depth", "Value": 5}],
    }
    async with opc_station.client(1, scope="cell2") as client, opc_station.mes("cell2") as mes:
        for kind, data in (
            ("workmaster", {**drill, "DataSchema": None}),  # a Work Master without a recipe
            ("personnel", [{"ID": "P1"}, {"ID": "P2"}]),
            ("materialclass", [{"MaterialClassID": "steel"}]),
            ("jobacceptance", {"MaxDownloadableJobOrders": 7}),
        ):
            assert return_status(await mes.configure(kind, data)) == ReturnStatus.NO_ERROR

        async def shown(name: str, value: Any) -> None:
            async def equal() -> bool:
                return bool(await client.receiver_variable(name) == value)

            await poll_until(equal)

        await shown("WorkMaster", [drill])  # not its recipe: ISA95WorkMasterDataType's fields
        await shown("PersonnelID", ["P1", "P2"])
        await shown("MaterialClassID", ["steel"])
        await shown("MaxDownloadableJobOrders", 7)
        assert await client.receiver_variable("PhysicalAssetID") == []

        removed = await mes.configure("personnel", {"ID": "P1"}, method="DELETE")
        assert return_status(removed) == ReturnStatus.NO_ERROR
        reset = await mes.configure("jobacceptance", None, method="DELETE")
        assert return_status(reset) == ReturnStatus.NO_ERROR
        await shown("PersonnelID", ["P2"])
        await shown("MaxDownloadableJobOrders", 0xFFFF)  # the setting: no limit


async def test_refusals_are_return_statuses_as_on_mqtt(opc_station: OpcStation) -> None:
    await configure_rear_axle(opc_station)
    async with opc_station.client() as client:
        assert (
            await client.act(JobMethod.START, "never-stored") == ReturnStatus.UNKNOWN_JOB_ORDER_ID
        )
        assert await client.store(job_order("R1", work_masters=["WM"])) == ReturnStatus.NO_ERROR
        duplicate = await client.store(job_order("R1", work_masters=["WM"]))
        assert duplicate == ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER
        unknown_master = await client.store(job_order("R2", work_masters=["nope"]))
        assert unknown_master == ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER
        assert await client.act(JobMethod.CLEAR, "R1") == ReturnStatus.INVALID_JOB_ORDER_STATUS
        assert await client.act(JobMethod.CANCEL, "R1") == ReturnStatus.NO_ERROR


async def test_bad_arguments_get_opc_ua_status_codes(opc_station: OpcStation) -> None:
    async with opc_station.client() as client:
        wrong_type = await client.raw_call(
            JobMethod.START, ua.Variant(7, ua.VariantType.Int32), NO_COMMENT
        )
        assert wrong_type.StatusCode.value == ua.StatusCodes.BadTypeMismatch
        assert [result.value for result in wrong_type.InputArgumentResults] == [
            ua.StatusCodes.BadTypeMismatch,
            ua.StatusCodes.Good,
        ]
        missing = await client.raw_call(JobMethod.START)
        assert missing.StatusCode.value == ua.StatusCodes.BadArgumentsMissing
        too_many = await client.raw_call(
            JobMethod.START, ua.Variant("J"), NO_COMMENT, ua.Variant("x")
        )
        assert too_many.StatusCode.value == ua.StatusCodes.BadTooManyArguments
        # The right type, content job management refuses: a JobOrderID cannot hold a '/'.
        refused = await client.raw_call(JobMethod.START, ua.Variant("a/b"), NO_COMMENT)
        assert refused.StatusCode.value == ua.StatusCodes.BadInvalidArgument
        assert refused.InputArgumentResults[0].value == ua.StatusCodes.BadInvalidArgument
        state = ua.ISA95StateDataType(StateText=ua.LocalizedText("Sleeping", "en"), StateNumber=42)
        query = JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE
        unknown_state = await client.raw_call(
            query, ua.Variant([state], ua.VariantType.ExtensionObject)
        )
        assert unknown_state.StatusCode.value == ua.StatusCodes.BadInvalidArgument


async def test_a_wrong_password_or_no_login_is_refused(
    opc_station: OpcStation, tmp_path: Path
) -> None:
    endpoint, certificates = opc_station.endpoints[0], opc_station.certificates
    guesser = await client_certificate(tmp_path)  # its own: it is barred for a while
    with pytest.raises(BadUserAccessDenied):
        async with connect(endpoint, guesser, username=USER, password="wrong"):
            pass
    # The right password right after, on the same certificate: refused unchecked (the pause);
    # the MES's own certificate is served meanwhile.
    with pytest.raises(BadUserAccessDenied):
        async with connect(endpoint, guesser, username=USER, password=PASSWORD):
            pass
    async with connect(endpoint, certificates, username=USER, password=PASSWORD) as client:
        assert await client.get_namespace_index(ISA95_URI) > 0
    with pytest.raises(UaError):  # no user token at all: anonymous is not offered
        async with connect(endpoint, certificates, username=None, password=None):
            pass
    with pytest.raises(UaError):  # security None is not offered unless configured
        async with connect(endpoint, None, username=USER, password=PASSWORD):
            pass
    with pytest.raises(UaError):  # nor Sign alone: the lowest mode is SignAndEncrypt
        async with opc_station.client(mode="Sign"):
            pass


async def test_start_up_figures_are_measured(opc_station: OpcStation) -> None:
    figures = opc_station.service().figures
    assert figures is not None
    assert 0 < figures.model_seconds < figures.seconds
    assert figures.peak_rss_mb > 0
