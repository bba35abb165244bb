"""The MES outage of the publishing design, at full length: 30 minutes by default.

Starts a private redis-server and mosquitto and a gateway (job management, the SFC engine, the
publisher and the simulated station, whose tightening controller fails a share of its commands,
so some jobs end Aborted), configures the rear-axle Work Master, and plays
``gateway.testing.outage.mes_outage``: jobs due one after another during the outage, the MES
disconnected meanwhile; on reconnect it must see the seq gap, every retained order and result,
lose no response and drain the backlog with Clear. Prints what it verified; exit status 1 when
something did not hold. ``tests/e2e/test_mes_outage.py`` runs the same with a 60 s outage.

    python benchmarks/mes_outage.py [--outage 1800] [--jobs 300] [--failure-rate 0.1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import anyio

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.testing import running
from gateway.testing.mqtt import connect_test_client
from gateway.testing.outage import OutageReport, mes_outage
from gateway.testing.services import mosquitto, redis_server
from gateway.topics import MesTopics

SCOPE = "cell1"
WORK_MASTER = "WM-AXLE"
RECIPE = Path(__file__).resolve().parents[1] / "examples" / "recipes" / "rear_axle.json"
SFC = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
WORK_MASTER_TYPE = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1"


def station(mqtt_url: str, redis_url: str, failure_rate: float) -> Gateway:
    environ = {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": "outage",
        "GATEWAY_GATEWAY_INSTANCE_ID": "outage",
        "GATEWAY_GATEWAY_LOG_LEVEL": "WARNING",
        "GATEWAY_SIMULATOR_ENABLED": "true",
        "GATEWAY_SIMULATOR_FAILURE_RATE": str(failure_rate),
        "GATEWAY_SIMULATOR_SEED": "1",
    }
    return Gateway.from_environment(None, environ)


async def configure(mqtt_url: str) -> None:
    work_master = {"ID": WORK_MASTER, "Data": json.loads(RECIPE.read_text()), "DataSchema": SFC}
    event = CloudEvent(
        type=WORK_MASTER_TYPE, source="urn:bench:mes", subject=SCOPE, data=work_master
    )
    async with connect_test_client(mqtt_url) as client:
        reply = await client.request(MesTopics().commands(SCOPE), event, timeout=30)
    if not isinstance(reply.data, dict) or reply.data.get("ReturnStatus") != 1:
        raise SystemExit(f"Work Master refused: {reply.errormessage or reply.data}")


async def run(outage: float, jobs: int, failure_rate: float) -> OutageReport:
    redis_process, broker = redis_server().start(), mosquitto().start()
    mqtt_url = f"mqtt://127.0.0.1:{broker.port}"
    redis_url = f"redis://127.0.0.1:{redis_process.port}/0"
    started = time.monotonic()

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - started:7.1f} s] {text}", flush=True)

    try:
        async with running(station(mqtt_url, redis_url, failure_rate)):
            await configure(mqtt_url)
            return await mes_outage(
                mqtt_url,
                SCOPE,
                WORK_MASTER,
                jobs=jobs,
                outage_seconds=outage,
                progress=progress,
                timeout=60,
            )
    finally:
        broker.close()
        redis_process.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--outage", type=float, default=1800, help="seconds the MES is away")
    parser.add_argument("--jobs", type=int, default=300, help="jobs due during the outage")
    parser.add_argument(
        "--failure-rate", type=float, default=0.1, help="share of failed tightenings (Aborted)"
    )
    args = parser.parse_args()
    report = anyio.run(run, args.outage, args.jobs, args.failure_rate)
    for line in report.lines():
        print(line)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
