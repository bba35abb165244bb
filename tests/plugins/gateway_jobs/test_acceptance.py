"""Station configuration and job acceptance, over MQTT.

Each acceptance check refuses a job that violates it, saying which check; every configuration
kind can be PUT and DELETEd; Work Masters are refused when their recipe cannot run here.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.testing import running, wait_until
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    TEST_DATASCHEMA,
    JobsMes,
    Station,
    job_order,
    return_status,
    work_master,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR
REFUSED = ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER

# Per kind: the configuration payload allowing "ok-<kind>", and job order fields requiring an ID.
RESOURCES: dict[str, tuple[dict[str, Any], Any]] = {
    "equipment": ({"ID": "ok-equipment"}, lambda v: {"EquipmentRequirements": [{"ID": v}]}),
    "materialclass": (
        {"MaterialClassID": "ok-materialclass"},
        lambda v: {"MaterialRequirements": [{"MaterialClassID": v}]},
    ),
    "materialdefinition": (
        {"MaterialDefinitionID": "ok-materialdefinition"},
        lambda v: {"MaterialRequirements": [{"MaterialDefinitionID": v}]},
    ),
    "personnel": ({"ID": "ok-personnel"}, lambda v: {"PersonnelRequirements": [{"ID": v}]}),
    "physicalasset": (
        {"ID": "ok-physicalasset"},
        lambda v: {"PhysicalAssetRequirements": [{"ID": v}]},
    ),
}


async def configure_all(mes: JobsMes) -> None:
    assert return_status(await mes.configure("workmaster", [work_master("wm", {})])) == OK
    for kind, (allowed, _) in RESOURCES.items():
        reply = await mes.configure(kind, [allowed])  # a list works as well as one resource
        assert return_status(reply) == OK, (kind, reply.errormessage)


def full_job(job_order_id: str, **override: str) -> dict[str, Any]:
    """A job needing one resource of every kind, all allowed unless ``override`` says."""
    fields: dict[str, Any] = {}
    for kind, (_, requirement) in RESOURCES.items():
        for key, value in requirement(override.get(kind, f"ok-{kind}")).items():
            if key == "MaterialRequirements" and key in fields:
                fields[key][0].update(value[0])
            else:
                fields[key] = value
    return job_order(job_order_id, **fields)


async def test_every_resource_check_refuses_what_is_not_allowed(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await configure_all(mes)
        accepted = await mes.store(full_job("good"))
        refused = {
            kind: await mes.store(full_job(f"bad-{kind}", **{kind: "nope"})) for kind in RESOURCES
        }
        listed = await mes.job_response("bad-equipment")
    assert return_status(accepted) == OK, accepted.errormessage
    for kind, reply in refused.items():
        assert return_status(reply) == REFUSED
        assert reply.errormessage is not None
        assert reply.errormessage.startswith(f"{kind}: "), reply.errormessage
        assert "'nope'" in reply.errormessage
    assert return_status(listed) == ReturnStatus.UNKNOWN_JOB_ORDER_ID  # nothing was stored


async def test_all_failed_checks_are_reported_together(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await configure_all(mes)
        reply = await mes.store(full_job("bad", equipment="e9", personnel="p9"))
    assert return_status(reply) == REFUSED
    message = reply.errormessage or ""
    assert message.startswith("equipment: ")
    assert "; personnel: " in message


@pytest.mark.parametrize(
    ("work_masters", "stored", "reason"),
    [
        ([], None, "names no Work Master"),
        (["other"], None, "Work Master 'other' is not configured"),
        (["plain"], {"ID": "plain"}, "carries no recipe"),
    ],
)
async def test_work_master_check(
    station: Station, work_masters: list[str], stored: dict[str, Any] | None, reason: str
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        await configure_all(mes)
        if stored is not None:  # a Work Master without a recipe may be configured...
            assert return_status(await mes.configure("workmaster", stored)) == OK
        reply = await mes.store(job_order("j", work_masters=work_masters))  # ...not run
    assert return_status(reply) == REFUSED
    assert (reply.errormessage or "").startswith("workmaster: ")
    assert reason in (reply.errormessage or "")


async def test_work_master_with_an_unknown_dataschema_or_a_bad_recipe_is_refused(
    station: Station,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        unknown = await mes.configure(
            "workmaster", work_master("wm", {}, dataschema="urn:nobody-reads-this")
        )
        invalid = await mes.configure(
            "workmaster", [work_master("good", {}), work_master("bad", {"invalid": "no steps"})]
        )
        job = await mes.store(job_order("j", work_masters=["good"]))
    assert return_status(unknown) == ReturnStatus.INVALID_REQUEST
    assert "no recipe interpreter for DataSchema 'urn:nobody-reads-this'" in (
        unknown.errormessage or ""
    )
    assert TEST_DATASCHEMA in (unknown.errormessage or "")  # the ones that exist are listed
    assert return_status(invalid) == ReturnStatus.INVALID_REQUEST
    assert "Work Master 'bad': recipe: recipe.invalid: no steps" in (invalid.errormessage or "")
    assert return_status(job) == REFUSED  # all or nothing: "good" was not stored either


async def test_max_job_orders_setting_and_scope_override(station: Station) -> None:
    async with running(station.gateway(max_job_orders="2")), station.mes() as mes:
        await configure_all(mes)
        statuses = [return_status(await mes.store(job_order(f"j{n}"))) for n in range(3)]
        full = await mes.store(job_order("j3"))
        cleared = await mes.act("Cancel", "j0")  # no longer counts
        after_cancel = await mes.store(job_order("j4"))
        override = await mes.configure("jobacceptance", {"MaxDownloadableJobOrders": 3})
        raised = await mes.store(job_order("j5"))
        removed = await mes.configure("jobacceptance", None, method="DELETE")
        back_to_setting = await mes.store(job_order("j6"))
    assert statuses == [OK, OK, REFUSED]
    assert (full.errormessage or "").startswith("max_job_orders: ")
    assert "maximum of 2 job orders" in (full.errormessage or "")
    assert return_status(cleared) == OK
    assert return_status(after_cancel) == OK
    assert return_status(override) == OK
    assert return_status(raised) == OK
    assert return_status(removed) == OK
    assert return_status(back_to_setting) == REFUSED


@pytest.mark.parametrize("kind", list(RESOURCES))
async def test_resource_put_and_delete(station: Station, kind: str) -> None:
    allowed, requirement = RESOURCES[kind]
    async with running(station.gateway()), station.mes() as mes:
        assert return_status(await mes.configure("workmaster", work_master("wm", {}))) == OK
        needing = job_order("j1", **requirement(f"ok-{kind}"))
        before = await mes.store(needing)
        put = await mes.configure(kind, allowed)
        after_put = await mes.store(needing)
        delete = await mes.configure(kind, allowed, method="DELETE")
        after_delete = await mes.store({**needing, "JobOrderID": "j2"})
    assert return_status(before) == REFUSED
    assert return_status(put) == OK
    assert return_status(after_put) == OK
    assert return_status(delete) == OK
    assert return_status(after_delete) == REFUSED


async def test_work_master_put_and_delete(station: Station) -> None:
    async with running(station.gateway()), station.mes() as mes:
        put = await mes.configure("workmaster", work_master("wm", {"run": False}))
        stored = await mes.store(job_order("j1"))
        delete = await mes.configure("workmaster", {"ID": "wm"}, method="DELETE")
        after_delete = await mes.store(job_order("j2"))
        # The stored job keeps the Work Master it was accepted with.
        started = await mes.act("Start", "j1")
        # Handed to its interpreter by the dispatch pass that follows the reply.
        await wait_until(lambda: station.plugin.interpreters[0].started == ["j1"])
    assert return_status(put) == OK
    assert return_status(stored) == OK
    assert return_status(delete) == OK
    assert return_status(after_delete) == REFUSED
    assert return_status(started) == OK


@pytest.mark.parametrize(
    ("kind", "data", "element"),
    [
        ("equipment", {"Description": []}, "data.ID"),
        ("materialclass", [{"MaterialDefinitionID": "m"}], "data[0].MaterialClassID"),
        ("jobacceptance", {"MaxDownloadableJobOrders": 70000}, "data"),
        ("jobacceptance", {"MaxDownloadableJobOrders": "3"}, "data.MaxDownloadableJobOrders"),
        ("workmaster", [{"ID": 5}], "data[0].ID"),
    ],
)
async def test_wrong_configuration_payloads_get_invalid_request(
    station: Station, kind: str, data: Any, element: str
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        reply = await mes.configure(kind, data)
    assert reply.errorcode == "invalid-request"
    assert (reply.errormessage or "").startswith(element + ":"), reply.errormessage
