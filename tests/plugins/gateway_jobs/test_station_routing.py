"""Routing by type and Work Master selection, over MQTT on real mosquitto and Redis.

Equipment declares the types it serves (``TypeIds``); a Work Master, and a job order at Store,
is refused when an action of its recipe reaches no equipment or driver, naming the action; a job
order naming no Work Master runs the scope's default; of several, the first available runs.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.recipes import recipe_version
from gateway.testing import running, wait_until
from gateway.testing.equipment import TestEquipment
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import Station, job_order, response_data, return_status, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OK = ReturnStatus.NO_ERROR
INVALID = ReturnStatus.INVALID_REQUEST
REFUSED = ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER
PRESS = "com.example.press.v1"
GAUGE = "com.example.gauge.v1"


@pytest.fixture
def routed(station: Station) -> Station:
    """The station with a driver that serves commands only to named equipment (no type
    routing of its own), as the MQTT driver configured with ``*`` does."""
    station.equipment = NamedOnly()
    return station


class NamedOnly(TestEquipment):
    __test__ = False

    def serves(self, command: Any) -> bool:
        return command.equipment is not None


def declaring(equipment: str, *types: str) -> dict[str, Any]:
    return {"ID": equipment, "Properties": [{"ID": "TypeIds", "Value": list(types)}]}


def recipe(*uses: dict[str, Any], run: bool = False) -> dict[str, Any]:
    """A scripted recipe asking ``uses`` of equipment (action, type_id, equipment, command)."""
    return {"run": run, "uses": list(uses)}


PRESSING = {"action": "press_it", "type_id": PRESS}


async def test_actions_without_equipment_route_by_the_types_equipment_declares(
    routed: Station,
) -> None:
    async with running(routed.gateway()) as gateway, routed.mes() as mes:
        before = await mes.configure("workmaster", work_master("wm", recipe(PRESSING)))
        declared = await mes.configure("equipment", [declaring("press-1", PRESS), {"ID": "x"}])
        after = await mes.configure("workmaster", work_master("wm", recipe(PRESSING)))
        stored = await mes.store(job_order("j1"))
        routed_to = await gateway.equipment.declaring("cell1", PRESS)
        elsewhere = await gateway.equipment.declaring("cell2", PRESS)
    assert return_status(before) == INVALID
    assert before.errormessage == (
        "workmaster: Work Master 'wm': action 'press_it' (com.example.press.v1): no equipment "
        "of scope 'cell1' declares its type (TypeIds) and no driver serves it "
        "(drivers: test-equipment, msgpack-rpc)"
    )
    assert return_status(declared) == OK
    assert return_status(after) == OK, after.errormessage
    assert return_status(stored) == OK, stored.errormessage
    assert (list(routed_to), list(elsewhere)) == (["press-1"], [])  # per scope


async def test_two_equipment_may_declare_one_type_but_routing_by_it_names_both(
    routed: Station,
) -> None:
    """Several equipment may declare one type (a fan-out goes to each, ``gateway.fanout``); an
    action routed by that type alone is refused, naming them: routing never guesses."""
    async with running(routed.gateway()) as gateway, routed.mes() as mes:
        first = await mes.configure("equipment", declaring("press-1", PRESS))
        second = await mes.configure("equipment", [declaring("press-2", GAUGE, PRESS)])
        routes = [list(await gateway.equipment.declaring("cell1", t)) for t in (PRESS, GAUGE)]
        refused = await mes.configure("workmaster", work_master("wm", recipe(PRESSING)))
        deleted = await mes.configure("equipment", {"ID": "press-2"}, method="DELETE")
        after_delete = list(await gateway.equipment.declaring("cell1", PRESS))
        accepted = await mes.configure("workmaster", work_master("wm", recipe(PRESSING)))
    assert [return_status(reply) for reply in (first, second)] == [OK, OK]
    assert routes == [["press-1", "press-2"], ["press-2"]]
    assert return_status(refused) == INVALID
    assert "equipment 'press-1' and 'press-2' both declare its type" in (refused.errormessage or "")
    assert return_status(deleted) == OK
    assert after_delete == ["press-1"]
    assert return_status(accepted) == OK, accepted.errormessage


async def test_a_type_ids_property_that_is_no_list_of_types_is_invalid(routed: Station) -> None:
    async with running(routed.gateway()), routed.mes() as mes:
        reply = await mes.configure(
            "equipment", {"ID": "p", "Properties": [{"ID": "TypeIds", "Value": "a.v1"}]}
        )
    assert reply.errorcode == "invalid-request"
    assert (reply.errormessage or "").startswith("data[0].Properties[0].Value: TypeIds must be")


async def test_store_refuses_a_job_whose_recipe_lost_its_route_naming_the_action(
    routed: Station,
) -> None:
    named = {"action": "gauge_it", "type_id": GAUGE, "equipment": "gauge-1"}
    async with running(routed.gateway()), routed.mes() as mes:
        assert return_status(await mes.configure("equipment", declaring("p1", PRESS))) == OK
        configured = await mes.configure("workmaster", work_master("wm", recipe(PRESSING, named)))
        assert return_status(configured) == OK, configured.errormessage
        assert return_status(await mes.configure("equipment", {"ID": "p1"}, method="DELETE")) == OK
        refused = await mes.store(job_order("j1"))
    assert return_status(refused) == REFUSED
    assert refused.errormessage == (
        "workmaster: Work Master 'wm': action 'press_it' (com.example.press.v1): no equipment "
        "of scope 'cell1' declares its type (TypeIds) and no driver serves it "
        "(drivers: test-equipment, msgpack-rpc)"
    )


async def test_a_pull_event_whose_type_nobody_declares_is_taken_from_any_equipment(
    routed: Station,
) -> None:
    waiting = {"action": "wait_qa", "type_id": GAUGE, "command": False}
    async with running(routed.gateway()), routed.mes() as mes:
        reply = await mes.configure("workmaster", work_master("wm", recipe(waiting)))
    assert return_status(reply) == OK, reply.errormessage


async def test_a_job_order_without_work_master_runs_the_scope_default(station: Station) -> None:
    gateway = station.gateway(default_work_master="wm-setting", max_running_job_orders="0")
    async with running(gateway), station.mes() as mes:  # all three run at once
        for name in ("wm-setting", "wm-scope"):
            assert return_status(await mes.configure("workmaster", work_master(name))) == OK
        by_setting = await mes.store(job_order("j1", work_masters=[]), method="StoreAndStart")
        scoped = await mes.configure("jobacceptance", {"DefaultWorkMasterID": "wm-scope"})
        by_scope = await mes.store(job_order("j2", work_masters=[]), method="StoreAndStart")
        named = await mes.store(job_order("j3", work_masters=["wm-setting"]), "StoreAndStart")
        ran = station.plugin.interpreters[0].work_masters
        # The dispatch pass that starts a job runs after the MES has its reply.
        await wait_until(lambda: len(ran) == 3)
    assert [return_status(r) for r in (by_setting, scoped, by_scope, named)] == [OK] * 4
    assert ran == {"j1": "wm-setting", "j2": "wm-scope", "j3": "wm-setting"}


async def test_without_a_default_a_job_order_naming_no_work_master_is_refused(
    station: Station,
) -> None:
    async with running(station.gateway()), station.mes() as mes:
        no_default = await mes.store(job_order("j1", work_masters=[]))
        assert (
            return_status(await mes.configure("jobacceptance", {"DefaultWorkMasterID": "x"})) == OK
        )
        unknown_default = await mes.store(job_order("j2", work_masters=[]))
    assert return_status(no_default) == REFUSED
    assert "names no Work Master (WorkMasterID is empty) and scope 'cell1' has no default" in (
        no_default.errormessage or ""
    )
    assert unknown_default.errormessage == "workmaster: Work Master 'x' is not configured"


async def test_of_several_work_masters_the_first_available_runs(routed: Station) -> None:
    """Unconfigured and unroutable ones are passed over; one whose equipment is offline is
    taken only when no other is usable; none usable: refused with what each lacks."""

    def pressing_on(equipment: str) -> dict[str, Any]:
        return recipe({**PRESSING, "equipment": equipment}, run=True)

    # Both jobs run at once (on different equipment): no queue in the way.
    async with running(routed.gateway(max_running_job_orders="0")) as gateway, routed.mes() as mes:
        await mes.configure("equipment", declaring("p-typed", GAUGE))
        for wm in (
            work_master("unroutable", recipe({"action": "gauge_it", "type_id": GAUGE})),
            work_master("on-offline", pressing_on("p-offline")),
            work_master("on-online", pressing_on("p-online")),
        ):
            assert return_status(await mes.configure("workmaster", wm)) == OK
        await gateway.equipment.heartbeat("p-online")
        await gateway.equipment.heartbeat("p-offline")
        await gateway.equipment.gone("p-offline", "disconnected")
        # Now no equipment declares GAUGE: "unroutable" lost its route.
        await mes.configure("equipment", {"ID": "p-typed"}, method="DELETE")

        async def store(job: str, *work_masters: str) -> Any:
            return await mes.store(job_order(job, work_masters=work_masters), "StoreAndStart")

        replies = [
            await store("j1", "missing", "unroutable", "on-offline", "on-online"),
            await store("j2", "on-offline", "missing"),
            await store("j3", "missing", "unroutable"),
        ]
        # The Job Response names the chosen one; an Update chooses again.
        chosen = await mes.job_response("j1")
        assert return_status(await mes.store(job_order("j4", work_masters=["on-offline"]))) == OK
        updated = await mes.store(job_order("j4", work_masters=["on-online"]), "Update")
        after_update = await mes.job_response("j4")
    assert [return_status(reply) for reply in replies] == [OK, OK, REFUSED]
    assert response_data(chosen.data["JobResponse"])["WorkMasterID"] == "on-online"
    assert return_status(updated) == OK, updated.errormessage
    data = response_data(after_update.data["JobResponse"])
    assert (data["WorkMasterID"], data["RecipeVersion"]) == (
        "on-online",
        recipe_version(pressing_on("p-online")),
    )
    ran = routed.plugin.interpreters[0].work_masters
    assert ran == {"j1": "on-online", "j2": "on-offline"}
    assert replies[2].errormessage == (
        "workmaster: Work Master 'missing' is not configured; workmaster: Work Master "
        "'unroutable': action 'gauge_it' (com.example.gauge.v1): no equipment of scope 'cell1' "
        "declares its type (TypeIds) and no driver serves it (drivers: test-equipment, msgpack-rpc)"
    )


async def test_concurrent_puts_declaring_one_type_keep_both(routed: Station) -> None:
    """Two instances take two PUTs at once, each declaring PRESS for other equipment: the
    WATCHed read-modify-write of the scope's types loses neither, whichever order they commit in
    (several equipment may declare one type: a fan-out goes to each)."""
    replies: dict[str, Any] = {}
    async with (
        running(routed.gateway("a")) as gateway,
        running(routed.gateway("b")),
        routed.mes() as first,
        routed.mes() as second,
    ):

        async def put(mes: Any, equipment: str) -> None:
            replies[equipment] = await mes.configure("equipment", declaring(equipment, PRESS))

        for round_ in range(5):
            replies.clear()
            names = (f"p{round_}-x", f"p{round_}-y")
            async with anyio.create_task_group() as group:
                group.start_soon(put, first, names[0])
                group.start_soon(put, second, names[1])
            assert [return_status(replies[name]) for name in names] == [OK, OK], replies
            assert list(await gateway.equipment.declaring("cell1", PRESS)) == list(names)
            for name in names:  # give the type up again for the next round
                assert return_status(await first.configure("equipment", {"ID": name})) == OK
