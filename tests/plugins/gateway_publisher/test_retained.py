"""Retained topics on a real broker: Store, completion, Clear, Cancel, late results, new scopes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from gateway.changes import ChangeRecord, Trigger
from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.jobstates import JobState
from gateway.recipes import ProcessValue
from gateway.store import Store
from gateway.testing import running, wait_until
from gateway.testing.mes import MesClient, StateIndex
from gateway_jobs.testing import job_order, return_status
from gateway_publisher.topics import JOB_ORDER_TYPE, JOB_RESPONSE_TYPE, STATE_INDEX_TYPE

if TYPE_CHECKING:
    from tests.plugins.gateway_publisher.conftest import Rig

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = 1  # ReturnStatus NO_ERROR
TTL = 172_800


async def retained(mes: MesClient, *levels: str, timeout: float = 0.3) -> MqttMessage | None:
    """What a fresh subscriber of the topic receives (``None``: no retained message)."""
    async with mes.client.watch(mes.topic(*levels)) as messages:
        with anyio.move_on_after(timeout):
            return await messages.receive()
    return None


async def index_when(mes: MesClient, condition: Callable[[StateIndex], bool]) -> StateIndex:
    seen = await mes.follow(condition, timeout=5)
    return seen[-1][0]


def states(index: StateIndex) -> dict[str, tuple[tuple[str, ...], bool]]:
    return {job.job_order_id: (job.state, job.has_result) for job in index.jobs}


async def test_store_completion_and_clear_as_a_late_subscriber_sees_them(rig: Rig) -> None:
    async with running(rig.gateway()), rig.jobs_mes() as jobs, rig.mes() as mes:
        assert return_status(await jobs.store(job_order("j1", priority=5))) == OK
        await index_when(mes, lambda index: bool(index.jobs))
        async with rig.mes() as late:  # a fresh subscriber gets the current state at once
            index = await late.index()
            order = await retained(late, "order", "j1")
        assert index is not None
        assert states(index) == {"j1": (("NotAllowedToStart", "Ready"), False)}
        assert order is not None
        assert order.retain
        assert 0 < (order.message_expiry_interval or 0) <= TTL
        event = from_mqtt(order)
        assert (event.type, event.subject) == (JOB_ORDER_TYPE, "cell1")
        assert event.data["JobOrderID"] == "j1"
        assert event.data["Priority"] == 5

        await jobs.act("Start", "j1")  # the scripted recipe runs and completes at once
        index = await index_when(mes, lambda index: index.jobs[0].has_result)
        assert states(index) == {"j1": (("Ended", "Completed"), True)}
        result = await retained(mes, "result", "j1")
        assert result is not None
        assert 0 < (result.message_expiry_interval or 0) <= TTL
        response = from_mqtt(result)
        assert response.type == JOB_RESPONSE_TYPE
        assert response.data["JobOrderID"] == "j1"
        assert {entry["ID"] for entry in response.data["JobResponseData"]} == {
            "RecipeVersion",
            "WorkMasterID",
            "torque",
            "serial",
        }

        await jobs.act("Clear", "j1")
        await index_when(mes, lambda index: not index.jobs)
        assert await retained(mes, "order", "j1") is None
        assert await retained(mes, "result", "j1") is None
        state_index = await retained(mes, "state-index")
        assert state_index is not None
        assert from_mqtt(state_index).type == STATE_INDEX_TYPE
        assert state_index.message_expiry_interval
        assert await retained(mes, "index", "0") is None  # no pages unless asked for


async def test_the_state_index_lists_every_job_inline_as_the_design_says(rig: Rig) -> None:
    """The MicroDCS shape: ``seq``, ``scope``, ``published_at`` and ``jobs`` (each id, state,
    has_result) in the one retained document, read here as raw JSON, not through MesClient."""
    async with running(rig.gateway()), rig.jobs_mes() as jobs, rig.mes() as mes:
        for number in range(30):  # more than a page would hold
            await jobs.store(job_order(f"j{number:02d}"))
        await index_when(mes, lambda index: len(index.jobs) == 30)
        message = await retained(mes, "state-index")
    assert message is not None
    document = json.loads(message.payload)
    assert {"seq", "scope", "published_at", "jobs"} <= document.keys()
    assert "pages" not in document
    assert document["scope"] == "cell1"
    assert [job["job_order_id"] for job in document["jobs"]] == [f"j{n:02d}" for n in range(30)]
    assert document["jobs"][0] == {
        "job_order_id": "j00",
        "state": [
            {"state_text": {"text": "NotAllowedToStart", "locale": "en"}, "state_number": 1},
            {"state_text": {"text": "Ready", "locale": "en"}, "state_number": 2},
        ],
        "has_result": False,
    }


async def test_the_paged_index_is_opt_in(rig: Rig) -> None:
    """``publisher.index_pages``: the index lists pages, the jobs are on index/<page>."""
    gateway = rig.gateway(
        GATEWAY_PUBLISHER_INDEX_PAGES="true", GATEWAY_PUBLISHER_INDEX_PAGE_SIZE="2"
    )
    async with running(gateway), rig.jobs_mes() as jobs, rig.mes(paged=True) as mes:
        for job in ("a", "b", "c"):
            await jobs.store(job_order(job))
        index = await index_when(mes, lambda index: len(index.jobs) == 3)
        assert [page.page for page in index.pages] == [0, 1]
        raw = await retained(mes, "state-index")
        page = await retained(mes, "index", "1")
    assert raw is not None
    assert page is not None
    assert "jobs" not in json.loads(raw.payload)
    assert [job["job_order_id"] for job in json.loads(page.payload)["jobs"]] == ["c"]


async def test_cancel_deletes_the_order_and_drops_the_job(rig: Rig) -> None:
    async with running(rig.gateway()), rig.jobs_mes() as jobs, rig.mes() as mes:
        await jobs.store(job_order("low", priority=1))
        await jobs.store(job_order("high", priority=9))
        index = await index_when(mes, lambda index: len(index.jobs) == 2)
        assert [job.job_order_id for job in index.jobs] == ["high", "low"]  # by priority
        assert return_status(await jobs.act("Cancel", "low")) == OK
        index = await index_when(mes, lambda index: len(index.jobs) == 1)
        assert states(index) == {"high": (("NotAllowedToStart", "Ready"), False)}
        assert await retained(mes, "order", "low") is None
        assert await retained(mes, "order", "high") is not None


async def test_results_recorded_after_the_end_are_republished(rig: Rig) -> None:
    gateway = rig.gateway()
    async with running(gateway), rig.jobs_mes() as jobs, rig.mes() as mes:
        await jobs.store(job_order("j1"), "StoreAndStart")
        await index_when(mes, lambda index: bool(index.jobs) and index.jobs[0].has_result)
        late = [ProcessValue("late_check", True)]
        assert await gateway.job_control.record_results("cell1", "j1", late)
        with anyio.fail_after(5):
            while True:
                result = await retained(mes, "result", "j1")
                assert result is not None
                ids = {entry["ID"] for entry in from_mqtt(result).data["JobResponseData"]}
                if "late_check" in ids:
                    break
        assert ids == {"RecipeVersion", "WorkMasterID", "torque", "serial", "late_check"}


def record(job: str, change_type: str, state: str, **documents: str) -> ChangeRecord:
    after = JobState(state)
    trigger = Trigger(change_type)
    return ChangeRecord(trigger, "cell9", job, after, JobState.INITIAL, 0, after.final, **documents)


async def append(store: Store, *records: ChangeRecord | dict[str, str]) -> None:
    """Append ``records`` in one transaction; a ``dict`` as raw fields (no change record)."""
    async with store.transaction("cell9") as transaction:
        for change in records:
            if isinstance(change, ChangeRecord):
                transaction.append_change(change)
            else:
                transaction.pipeline.xadd(store.keys.changes("cell9"), change)


async def test_records_that_carry_the_documents_need_no_document_source(
    rig: Rig, store: Store
) -> None:
    order: dict[str, Any] = {"JobOrderID": "j1", "WorkMasterID": [{"ID": "wm"}]}
    response = {"JobResponseID": "j1", "JobOrderID": "j1", "JobResponseData": [{"ID": "x"}]}
    async with running(rig.gateway(documents=False)), rig.mes("cell9") as mes:
        await append(
            store,
            record("j1", "Store", "NotAllowedToStart.Ready", job_order=json.dumps(order)),
            {"change_type": "Store", "state": "Running"},  # malformed: skipped, not blocking
            record("j2", "Store", "NotAllowedToStart.Ready"),  # no document, no source
            record("j1", "Complete", "Ended.Completed", job_response=json.dumps(response)),
            record("j2", "Abort", "Aborted"),
        )
        index = await index_when(mes, lambda index: len(index.jobs) == 2)
        assert states(index) == {
            "j1": (("Ended", "Completed"), True),
            "j2": (("Aborted",), False),  # its result could not be published
        }
        order_message = await retained(mes, "order", "j1")
        result_message = await retained(mes, "result", "j1")
        assert await retained(mes, "order", "j2") is None
    assert order_message is not None
    assert result_message is not None
    assert json.loads(order_message.payload) == order
    assert json.loads(result_message.payload) == response


async def test_a_new_scope_is_discovered_while_running(rig: Rig) -> None:
    gateway = rig.gateway()
    async with running(gateway), rig.jobs_mes("cell2") as jobs, rig.mes("cell2") as mes:
        await wait_until(lambda: rig.service.term is not None)
        await jobs.store(job_order("j1"))
        index = await index_when(mes, lambda index: bool(index.jobs))
    assert index.scope == "cell2"
    assert states(index) == {"j1": (("NotAllowedToStart", "Ready"), False)}
