"""The simulated MES of the demo, and what the terminal shows while the station works."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TextIO

import anyio

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.hookspecs import hookimpl
from gateway.testing.mes import MesClient
from gateway.testing.mqtt import MqttTestClient

SCOPE = "cell"
TOPIC_PREFIX = "demo"
WORK_MASTER = "WM-REAR-AXLE"
SFC_DATASCHEMA = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
JOBS = "org.opcfoundation.ISA95-JOBCONTROL_V2"
WORK_MASTER_CONFIG = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1"
NO_ERROR = 1


def rear_axle_recipe() -> Any:
    return json.loads((resources.files("gateway_demo") / "rear_axle.json").read_text())


@dataclass
class Progress:
    """Follows jobs and steps through the gateway's observer hooks."""

    states: dict[str, str] = field(default_factory=dict)  # job -> state path
    active: dict[str, set[str]] = field(default_factory=dict)  # job -> active steps
    steps_done: int = 0

    @hookimpl
    def gateway_job_state_changed(
        self, scope: str, job_order_id: str, method: str, previous: str, current: str
    ) -> None:
        self.states[job_order_id] = current

    @hookimpl
    def gateway_step_changed(self, scope: str, job_order_id: str, step: str, active: bool) -> None:
        steps = self.active.setdefault(job_order_id, set())
        if active:
            steps.add(step)
        else:
            steps.discard(step)
            self.steps_done += 1

    def ended(self) -> list[str]:
        return [job for job, state in self.states.items() if state.startswith(("Ended", "Aborted"))]

    def line(self, elapsed: float, total: int) -> str:
        by_state = Counter(state.split(".")[0] for state in self.states.values())
        states = ", ".join(f"{name} {count}" for name, count in sorted(by_state.items()))
        running = [
            f"{job}: {', '.join(sorted(steps))}"
            for job, steps in sorted(self.active.items())
            if steps and not self.states.get(job, "").startswith(("Ended", "Aborted"))
        ]
        return (
            f"{elapsed:5.1f} s  jobs {len(self.ended())}/{total} done  [{states or 'none yet'}]"
            f"  {' | '.join(running[:3])}"
        )


@dataclass
class DemoMes:
    """Configures the station, starts the jobs, waits for them, reads and clears the results."""

    client: MqttTestClient
    progress: Progress
    jobs: int
    interval: float
    out: TextIO = sys.stdout

    @property
    def commands(self) -> str:
        return f"{TOPIC_PREFIX}/{SCOPE}/commands"

    def event(self, type: str, data: Any) -> CloudEvent:
        return CloudEvent(type=type, source="urn:demo:mes", subject=SCOPE, data=data)

    async def call(self, type: str, data: Any) -> CloudEvent:
        reply = await self.client.request(self.commands, self.event(type, data), timeout=10)
        status = reply.data.get("ReturnStatus") if isinstance(reply.data, dict) else None
        if status != NO_ERROR:
            raise RuntimeError(f"{type} refused: {reply.errormessage or reply.data}")
        return reply

    async def configure(self) -> None:
        work_master = {
            "ID": WORK_MASTER,
            "Description": {"Text": "Rear axle fitting with parallel camera QA"},
            "Parameters": [{"ID": "torque_spec", "Value": "85Nm"}],
            "Data": rear_axle_recipe(),
            "DataSchema": SFC_DATASCHEMA,
        }
        await self.call(WORK_MASTER_CONFIG, work_master)

    async def start_jobs(self) -> list[str]:
        names = [f"AXLE-{number:04d}" for number in range(1, self.jobs + 1)]
        for name in names:
            order = {"JobOrderID": name, "WorkMasterID": [{"ID": WORK_MASTER}], "Priority": 1}
            await self.call(f"{JOBS}.StoreAndStart.v2", {"JobOrder": order})
            await anyio.sleep(self.interval)
        return names

    async def follow(self, started: float, timeout: float) -> None:
        """Redraw the progress line until every job ended (or ``timeout``)."""
        live = self.out.isatty()
        last = ""
        with anyio.move_on_after(timeout):
            while len(self.progress.ended()) < self.jobs:
                line = self.progress.line(time.monotonic() - started, self.jobs)
                if live:
                    self.out.write("\r\033[K" + line)
                    self.out.flush()
                elif line != last:
                    print(line, file=self.out)
                last = line
                await anyio.sleep(0.25)
        final = self.progress.line(time.monotonic() - started, self.jobs)
        print(("\r\033[K" if live else "") + final, file=self.out)

    async def collect(self) -> dict[str, Any]:
        """Read every result from the retained topics as an MES does, and Clear the jobs."""
        mes = MesClient(self.client, TOPIC_PREFIX, SCOPE)
        # Taken once: a job the MES clears leaves the Ended state, so the count would shrink.
        ended = set(self.progress.ended())
        with anyio.fail_after(30):
            while not ended <= mes.results.keys():
                await mes.resync()
                if not ended <= mes.results.keys():
                    await anyio.sleep(0.2)  # the publisher is still catching up
        return dict(mes.results)


def summary(results: dict[str, Any], progress: Progress, elapsed: float) -> list[str]:
    lines = []
    outcomes: Counter[str] = Counter()
    for job in sorted(results):
        response = results[job]
        states = [state["StateText"]["Text"] for state in response.get("JobState", [])]
        outcome = "/".join(states[:2]) or "?"
        outcomes[states[0] if states else "?"] += 1
        data = {entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])}
        lines.append(f"  {job}  {outcome:<16} {_describe(data)}")
    done = sum(outcomes.values())
    head = (
        f"Demo finished in {elapsed:.1f} s: {done} jobs, {outcomes['Ended']} completed, "
        f"{outcomes['Aborted']} aborted"
    )
    rate = f"{60 * done / elapsed:.0f} jobs/min" if elapsed else "-"
    tail = (
        f"Throughput: {rate}, {progress.steps_done} recipe steps. The simulated MES read every "
        "result from the retained MQTT topics and cleared the jobs."
    )
    return [head, *lines, tail]


def _describe(data: dict[str, Any]) -> str:
    parts = []
    tighten = data.get("tighten")
    if isinstance(tighten, dict) and "torque" in tighten:
        ok = "ok" if tighten.get("torque_ok", True) else "NOT ok"
        parts.append(f"torque {tighten['torque']:.1f} {tighten.get('unit', 'Nm')} ({ok})")
    qa = data.get("camera_qa")
    if isinstance(qa, dict):
        parts.append("QA passed" if qa.get("passed") else "QA rejected")
    if data.get("Error"):
        parts.append(f"error: {data['Error']}")
    return ", ".join(parts)


async def run_demo(gateway: Gateway, mes: DemoMes, timeout: float) -> int:
    """Everything after start-up; the exit status (0: every job completed)."""
    started = time.monotonic()
    await mes.configure()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(mes.follow, started, timeout)
        await mes.start_jobs()
    results = await mes.collect()
    for line in summary(results, mes.progress, time.monotonic() - started):
        print(line, file=mes.out)
    completed = all(
        result.get("JobState", [{}])[0].get("StateText", {}).get("Text") == "Ended"
        for result in results.values()
    )
    return 0 if completed and len(results) == mes.jobs else 1
