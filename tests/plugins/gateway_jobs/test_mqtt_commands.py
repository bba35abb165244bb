"""Job methods over MQTT: representative refusals, both payload encodings, and wrong payloads.

A wrong payload (bad JSON, wrong shape or types, no scope) gets the ``invalid-request`` error
reply naming the field, and the store is left exactly as it was.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cloudevents import MSGPACK, CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.store import Store
from gateway.testing import running
from gateway_jobs.events import method_type
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, Station, job_order, return_status, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def job_records(store: Store, scope: str = "cell1") -> dict[str, Any]:
    """What a refused method could have changed: the job documents, the job indexes and the
    scope's change stream (not the publisher's own keys, which it writes meanwhile)."""
    client, keys = store.client, store.keys
    tops = ["NotAllowedToStart", "AllowedToStart", "Running", "Interrupted", "Ended", "Aborted"]
    jobs = [key async for key in client.scan_iter(match=keys.scoped(scope, "job*"))]
    return {
        "documents": {key: await client.get(key) for key in sorted(jobs) if ":jobs:" not in key},
        "priority": await client.zrange(keys.scoped(scope, "jobs", "by-priority"), 0, -1),
        "states": {
            top: sorted(await client.smembers(keys.scoped(scope, "jobs", "state", top)))
            for top in tops
        },
        "changes": await client.xrange(keys.changes(scope)),
    }


async def prepare(mes: JobsMes) -> None:
    assert return_status(await mes.configure("workmaster", work_master("wm", {}))) == 1


async def test_refusals_say_why_and_change_nothing(station: Station, store: Store) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await prepare(mes)
        await mes.store(job_order("j1"))
        before = await job_records(store)
        replies = {
            "unknown": await mes.act("Pause", "nope"),
            "invalid": await mes.act("Resume", "j1"),
            "duplicate": await mes.store(job_order("j1", priority=9)),
        }
        after = await job_records(store)
        stored = await mes.call(
            "RequestJobResponseByJobOrderState",
            {"JobOrderState": [{"StateText": {"Text": "NotAllowedToStart"}}]},
        )
    assert return_status(replies["unknown"]) == ReturnStatus.UNKNOWN_JOB_ORDER_ID
    assert replies["unknown"].errormessage == "unknown: no job order 'nope' in scope 'cell1'"
    assert return_status(replies["invalid"]) == ReturnStatus.INVALID_JOB_ORDER_STATUS
    assert replies["invalid"].errormessage is not None
    assert replies["invalid"].errormessage.startswith(
        "invalid-state: Resume is not allowed in state NotAllowedToStart.Ready"
    )
    assert return_status(replies["duplicate"]) == ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER
    assert (replies["duplicate"].errormessage or "").startswith("duplicate:")
    assert [reply.type for reply in replies.values()] == [
        method_type("Pause"),
        method_type("Resume"),
        method_type("Store"),
    ]
    assert all(reply.errorcode is None for reply in replies.values())  # answers, not failures
    assert before == after
    assert store.keys.scoped("cell1", "job", "j1") in before["documents"]  # the snapshot sees j1
    assert before["states"]["NotAllowedToStart"] == ["j1"]
    assert before["changes"]
    assert [item["JobOrderID"] for item in stored.data["JobResponses"]] == ["j1"]


async def test_snake_case_and_msgpack_payloads_are_understood(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await prepare(mes)
        snake = await mes.call(
            "Store", {"job_order": {"job_order_id": "j1", "work_master_id": [{"id": "wm"}]}}
        )
        packed = await mes.call("Store", {"JobOrder": job_order("j2")}, datacontenttype=MSGPACK)
        response = await mes.call(
            "RequestJobResponseByJobOrderID", {"JobOrderID": "j2"}, datacontenttype=MSGPACK
        )
    assert return_status(snake) == ReturnStatus.NO_ERROR
    assert return_status(packed) == ReturnStatus.NO_ERROR
    assert packed.datacontenttype == MSGPACK
    assert response.data["JobResponse"]["JobOrderID"] == "j2"


async def test_higher_priority_jobs_come_first(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await prepare(mes)
        for name, priority in [("low", 1), ("none", None), ("high", 10), ("mid", 5)]:
            assert return_status(await mes.store(job_order(name, priority=priority))) == 1
        update = await mes.call("Update", {"JobOrder": job_order("low", priority=20)})
        listed = await mes.call(
            "RequestJobResponseByJobOrderState",
            {"JobOrderState": [{"StateNumber": 1}, {"StateNumber": 2}]},
        )
    assert return_status(update) == ReturnStatus.NO_ERROR
    order = [item["JobOrderID"] for item in listed.data["JobResponses"]]
    assert order == ["low", "high", "mid", "none"]


def raw_command(topic: str, payload: bytes, **attributes: str) -> MqttMessage:
    fields = {"specversion": "1.0", "id": "m1", "source": "urn:test:mes", **attributes}
    return MqttMessage(
        topic=topic,
        payload=payload,
        content_type="application/json",
        user_properties=tuple(fields.items()),
    )


BAD_PAYLOADS: list[tuple[str, Any, str]] = [
    ("Store", {"JobOrder": "j1"}, "data.JobOrder"),
    ("Store", {"JobOrder": {"JobOrderID": 12}}, "data.JobOrder.JobOrderID"),
    ("Store", {"JobOrder": {"JobOrderID": "j1", "Priority": "high"}}, "data.JobOrder.Priority"),
    ("Store", {"JobOrder": {"JobOrderID": "a/b"}}, "data.JobOrder"),
    ("Store", {"JobOrder": {"JobOrderID": "j1"}, "Note": "x"}, "data"),
    ("Store", None, "data"),
    ("Start", {"JobOrderID": ["j1"]}, "data.JobOrderID"),
    ("Update", {"JobOrderID": "j1"}, "data.JobOrder"),
    ("RequestJobResponseByJobOrderState", {"JobOrderState": []}, "data.JobOrderState"),
    (
        "RequestJobResponseByJobOrderState",
        {"JobOrderState": [{"StateText": {"Text": "Sleeping"}}]},
        "data.JobOrderState",
    ),
]


async def test_wrong_payloads_get_invalid_request_and_change_nothing(
    station: Station, store: Store
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await prepare(mes)
        before = await job_records(store)
        replies = [await mes.call(method, data) for method, data, _ in BAD_PAYLOADS]
        bad_json = from_mqtt(
            await mes.client.request_raw(
                raw_command(
                    mes.commands_topic,
                    b'{"JobOrder": {',
                    type=method_type("Store"),
                    subject="cell1",
                )
            )
        )
        no_scope = await mes.client.request(
            mes.commands_topic,
            CloudEvent(type=method_type("Store"), source="urn:test", data={"JobOrder": {}}),
        )
        after = await job_records(store)
        still_working = await mes.store(job_order("j-ok"))
    for (method, _, element), reply in zip(BAD_PAYLOADS, replies, strict=True):
        assert reply.errorcode == "invalid-request", (method, reply.data)
        assert (reply.errormessage or "").startswith(element + ":"), reply.errormessage
        assert reply.type == method_type(method)
    assert bad_json.errorcode == "invalid-request"
    assert no_scope.errorcode == "invalid-request"
    assert (no_scope.errormessage or "").startswith("subject")
    assert before == after
    assert return_status(still_working) == ReturnStatus.NO_ERROR
