"""The MES outage of the publishing design, with a real 30 s outage (the design says 30 min:
``python benchmarks/mes_outage.py`` runs that one).

A station with the SFC engine, the publisher and the simulated equipment (whose tightening
controller fails some commands, so some jobs end Aborted); jobs due one after another while the
MES is disconnected; on reconnect the MES sees the seq gap, every retained order and result,
loses no response and drains the backlog with Clear (``gateway.testing.outage``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.app import Gateway
from gateway.testing import running
from gateway.testing.outage import mes_outage
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import connect_mes, return_status
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OUTAGE_SECONDS = 30
JOBS = 12  # one due every 2.5 s
RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "rear_axle.json"


def station(mqtt_url: str, redis_url: str, name: str) -> Gateway:
    environ = {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": name,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": name,
        "GATEWAY_GATEWAY_INSTANCE_ID": name,
        "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
        "GATEWAY_JOBS_TOPIC_PREFIX": name,
        "GATEWAY_SIMULATOR_ENABLED": "true",
        "GATEWAY_SIMULATOR_TOPIC_PREFIX": f"{name}-devices",
        "GATEWAY_SIMULATOR_FAILURE_RATE": "0.3",  # seeded: some jobs end Aborted
        "GATEWAY_SIMULATOR_SEED": "1",
    }
    return Gateway.from_environment(None, environ)


async def test_an_mes_away_for_30_s_sees_the_gap_and_loses_no_response(
    mqtt_url: str, redis_url: str, unique: str
) -> None:
    work_master = {
        "ID": "WM-AXLE",
        "Data": json.loads(RECIPE.read_text()),
        "DataSchema": DATASCHEMA,
    }
    async with running(station(mqtt_url, redis_url, unique)):
        async with connect_mes(mqtt_url, unique) as mes:
            configured = await mes.configure("workmaster", work_master)
        assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
        report = await mes_outage(
            mqtt_url,
            "cell1",
            "WM-AXLE",
            jobs=JOBS,
            outage_seconds=OUTAGE_SECONDS,
            prefix=unique,
        )
    assert report.ok, "\n".join(report.lines())
    assert report.outage_seconds >= OUTAGE_SECONDS
    assert set(report.ended_during_outage.values()) == {"Ended", "Aborted"}
    assert report.gap is not None
    assert report.gap.kind == "missed"
    assert report.results_retained == report.orders_retained == report.cleared == JOBS
    assert report.index_drained
