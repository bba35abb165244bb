"""An execution's end reported twice at once is counted and logged once.

Two reports of one end can overlap: the reconciler's (it saw the end unreported on two passes)
and the ordinary one, slow under load or claimed from an instance thought dead. Job management
refuses the second Complete; the runtime must not log "recipe completed" twice nor count two
ended charts. Real Redis and mosquitto; the overlap is made by holding the first report at
job management until the second one reaches it too.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from gateway.testing import running, wait_until
from gateway.testing.equipment import TestEquipment, station_with
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import state_texts as state_of
from gateway_runtime.coordination import Coordinator
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


async def test_an_end_reported_twice_at_once_is_logged_and_counted_once(
    mqtt_url: str, redis_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = station_with(
        TestEquipment(), mqtt_url, redis_url, unique, GATEWAY_RUNTIME_RECONCILE_SECONDS="3600"
    )
    steps, control = gateway.state.get(Coordinator).steps, gateway.job_control
    report, complete = steps.report, control.complete
    both_reporting = anyio.Event()
    completes = 0
    reported: list[str] = []  # reports of the job that are over

    async def counted_report(scope: str, job: str) -> None:
        await report(scope, job)
        reported.append(job)

    async def complete_as_another_report_does(*args: Any, **kwargs: Any) -> bool:
        nonlocal completes
        completes += 1
        if completes == 1:  # the ordinary report: a second one starts before it goes on
            reporters.start_soon(counted_report, SCOPE, "J1")
            await both_reporting.wait()
        elif completes == 2:
            both_reporting.set()
        return await complete(*args, **kwargs)

    steps.report = counted_report  # type: ignore[method-assign]
    control.complete = complete_as_another_report_does  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="gateway_runtime.steps"):
        async with (
            running(gateway),
            connect_test_client(mqtt_url) as client,
            anyio.create_task_group() as reporters,
        ):
            mes = JobsMes(client, unique, SCOPE)
            wm = work_master("WM1", linear_recipe(1), dataschema=DATASCHEMA)
            assert return_status(await mes.configure("workmaster", wm)) == 1
            order = job_order("J1", work_masters=["WM1"])
            assert return_status(await mes.store(order, method="StoreAndStart")) == 1
            assert state_of(await final_response(mes, "J1"))[:2] == ["Ended", "Completed"]
            await wait_until(lambda: len(reported) == 2)
    ends = [r.getMessage() for r in caplog.records if "recipe completed" in r.getMessage()]
    assert ends == [f"job {SCOPE}/J1: recipe completed"]
    labels = {"outcome": "completed"}
    ended = gateway.metrics.registry.get_sample_value("gateway_recipe_charts_ended_total", labels)
    assert ended == 1
