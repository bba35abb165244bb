"""The simulated MES of the demo, and what the terminal shows while the station works."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import anyio
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt
from gateway.hookspecs import hookimpl
from gateway.jobstates import JobState, TopState
from gateway.mqttclient import CloudEventClient
from gateway.testing.mes import MesClient

SCOPE = "cell"
TOPIC_PREFIX = "demo"
WORK_MASTER = "WM-REAR-AXLE"
SFC_DATASCHEMA = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
JOBS = "org.opcfoundation.ISA95-JOBCONTROL_V2"
WORK_MASTER_CONFIG = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1"
NO_ERROR = 1
PRIORITIES = (2, 1, 3, 1, 5, 2, 1, 3)


def rear_axle_recipe() -> Any:
    return json.loads((resources.files("gateway_demo") / "rear_axle.json").read_text())


@dataclass
class Progress:
    """Follows jobs and steps through the gateway's observer hooks."""

    states: dict[str, JobState] = field(default_factory=dict)  # job -> its state
    active: dict[str, set[str]] = field(default_factory=dict)  # job -> active steps
    steps_done: int = 0
    queue: dict[str, Any] = field(default_factory=dict)  # the scope's retained queue document

    @hookimpl
    def gateway_job_state_changed(
        self, scope: str, job_order_id: str, method: str, previous: JobState, current: JobState
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
        return [job for job, state in self.states.items() if state.final]

    def counts(self) -> Counter[str]:
        return Counter(state.top.value for state in self.states.values())

    def line(self, elapsed: float, total: int) -> str:
        """One line, for output that is not a terminal (a log, a pipe): what changed."""
        states = ", ".join(f"{name} {count}" for name, count in sorted(self.counts().items()))
        line = f"{elapsed:5.1f} s  jobs {len(self.ended())}/{total} done  [{states or 'none yet'}]"
        running = ", ".join(job for job, _ in self.running())
        if running:
            line += f"  running: {running}"
        waiting = self.waiting()
        return f"{line}  waiting: {waiting}" if waiting else line

    def waiting(self) -> str:
        """The queue in the order the jobs will start: ``AXLE-0005 p5, AXLE-0002 p3``.

        The retained queue document follows the dispatcher a moment later than the hooks: a
        job the hooks already saw start is running, not waiting (each job is listed once)."""
        return ", ".join(
            f"{entry['JobOrderID']} p{entry['Priority']}"
            for entry in self.queue.get("Waiting") or []
            if self._queued(entry["JobOrderID"])
        )

    def _queued(self, job: str) -> bool:
        state = self.states.get(job)
        return (state is None or state.top is TopState.ALLOWED_TO_START) and not self.active.get(
            job
        )

    def running(self) -> list[tuple[str, str]]:
        """(job, its active steps) of the jobs still running."""
        return [
            (job, ", ".join(sorted(steps)))
            for job, steps in sorted(self.active.items())
            if steps and not self.states.get(job, JobState.INITIAL).final
        ]

    def view(self, elapsed: float, total: int, shown: int = 3) -> Group:
        """The live view on a terminal: a status line and the steps of a few running jobs.

        Every line is cut to the terminal's width (never wrapped), so each redraw replaces
        the previous one exactly.
        """
        states = ", ".join(f"{name} {count}" for name, count in sorted(self.counts().items()))
        head = Text(
            f"{elapsed:5.1f} s  jobs {len(self.ended())}/{total} done  [{states or 'none yet'}]",
            no_wrap=True,
            overflow="ellipsis",
        )
        rows = [
            Text(f"  running  {job}  {steps}", no_wrap=True, overflow="ellipsis")
            for job, steps in self.running()[:shown]
        ]
        if shown and self.queue.get("Waiting"):
            rows.append(
                Text(f"  waiting  {self.waiting()}", no_wrap=True, overflow="ellipsis", style="dim")
            )
        return Group(head, *rows)


@dataclass
class DemoMes:
    """Configures the station, starts the jobs, waits for them, reads the results and clears
    the jobs (unless ``keep_jobs``)."""

    client: CloudEventClient
    progress: Progress
    jobs: int
    interval: float
    out: Console = field(default_factory=Console)
    # Leave the jobs in the station (read the results, Clear none), for the web UI to show.
    keep_jobs: bool = False

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

    @property
    def queue_topic(self) -> str:
        return f"{TOPIC_PREFIX}/{SCOPE}/queue"

    async def watch_queue(self) -> None:
        """Keep ``progress.queue`` current from the retained queue topic, as an MES would."""
        async with self.client.watch(self.queue_topic) as stream:
            async for message in stream:
                event = from_mqtt(message)
                if isinstance(event.data, dict):
                    self.progress.queue = event.data

    async def start_jobs(self) -> list[str]:
        """StoreAndStart every job; the station runs one at a time (its capacity), so they
        queue, the highest priority first (the priorities vary to show it)."""
        names = [f"AXLE-{number:04d}" for number in range(1, self.jobs + 1)]
        for number, name in enumerate(names):
            priority = PRIORITIES[number % len(PRIORITIES)]
            order = {
                "JobOrderID": name,
                "WorkMasterID": [{"ID": WORK_MASTER}],
                "Priority": priority,
            }
            await self.call(f"{JOBS}.StoreAndStart.v2", {"JobOrder": order})
            await anyio.sleep(self.interval)
        return names

    async def follow(self, started: float) -> None:
        """Show progress until every job ended: redrawn in place on a terminal, else a line
        whenever something changed."""

        def elapsed() -> float:
            return time.monotonic() - started

        if not self.out.is_terminal:
            last = ""
            while len(self.progress.ended()) < self.jobs:
                line = self.progress.line(elapsed(), self.jobs)
                if line != last:
                    self.out.print(line, markup=False, highlight=False, soft_wrap=True)
                    last = line
                await anyio.sleep(0.25)
            self.out.print(self.progress.line(elapsed(), self.jobs), markup=False, soft_wrap=True)
            return
        view = self.progress.view(elapsed(), self.jobs)
        with Live(view, console=self.out, auto_refresh=False, transient=False) as live:
            try:
                while len(self.progress.ended()) < self.jobs:
                    live.update(self.progress.view(elapsed(), self.jobs), refresh=True)
                    await anyio.sleep(0.25)
            finally:  # also when interrupted: the last view stays, nothing half-drawn
                live.update(self.progress.view(elapsed(), self.jobs, shown=0), refresh=True)

    async def collect(self) -> dict[str, Any]:
        """Read every result from the retained topics as an MES does, and Clear the jobs."""
        mes = MesClient(self.client, TOPIC_PREFIX, SCOPE)
        # Taken once: a job the MES clears leaves the Ended state, so the count would shrink.
        ended = set(self.progress.ended())
        if self.keep_jobs:  # waits for the publisher to catch up; a missing one shows missing
            return await mes.retained("result", ended, timeout=30)
        with anyio.fail_after(30):
            while not ended <= mes.results.keys():
                await mes.resync()
                if not ended <= mes.results.keys():
                    await anyio.sleep(0.2)  # the publisher is still catching up
        return dict(mes.results)


def summary(
    results: dict[str, Any], progress: Progress, elapsed: float, *, keep: bool = False
) -> Group:
    """The end of the demo: totals, a row per job, throughput."""
    outcomes: Counter[str] = Counter()
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("job", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("results", overflow="fold")
    for job in sorted(results):
        response = results[job]
        states = [state["StateText"]["Text"] for state in response.get("JobState", [])]
        outcomes[states[0] if states else "?"] += 1
        data = {entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])}
        table.add_row(job, "/".join(states[:2]) or "?", _describe(data))
    done = sum(outcomes.values())
    head = (
        f"Demo finished in {elapsed:.1f} s: {done} jobs, {outcomes['Ended']} completed, "
        f"{outcomes['Aborted']} aborted"
    )
    rate = f"{60 * done / elapsed:.0f} jobs/min" if elapsed else "-"
    tail = (
        f"Throughput: {rate}, {progress.steps_done} recipe steps. The simulated MES read every "
        "result from the retained MQTT topics"
        + (" and left the jobs for the web UI." if keep else " and cleared the jobs.")
    )
    return Group(Text(head, style="bold"), table, Text(tail))


def summary_document(
    results: dict[str, Any], progress: Progress, elapsed: float, total: int
) -> dict[str, Any]:
    """The end of the demo for ``--json``: totals and each job's state and results."""
    jobs = {
        job: {
            "state": [state["StateText"]["Text"] for state in response.get("JobState", [])],
            "results": {
                entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])
            },
        }
        for job, response in sorted(results.items())
    }
    outcomes = Counter(states[0] if states else "?" for states in _top_states(results))
    return {
        "jobs": total,
        "completed": outcomes[TopState.ENDED],
        "aborted": outcomes[TopState.ABORTED],
        "seconds": round(elapsed, 3),
        "recipe_steps": progress.steps_done,
        "results": jobs,
    }


def _top_states(results: dict[str, Any]) -> list[list[str]]:
    return [
        [state["StateText"]["Text"] for state in response.get("JobState", [])]
        for response in results.values()
    ]


def partial_summary(progress: Progress, total: int, elapsed: float, why: str) -> Text:
    """What had happened when the demo was interrupted or gave up."""
    counts = progress.counts()
    others = ", ".join(
        f"{count} {name}" for name, count in sorted(counts.items()) if name != TopState.ENDED
    )
    return Text(
        f"Demo {why} after {elapsed:.1f} s: {counts[TopState.ENDED]} of {total} jobs completed"
        f"{', ' + others if others else ''}, {progress.steps_done} recipe steps. "
        "The gateway stopped cleanly."
    )


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


async def run_demo(gateway: Gateway, mes: DemoMes, started: float, *, as_json: bool = False) -> int:
    """Everything after start-up; the exit status (0: every job completed). With ``as_json``
    the summary is one JSON document on standard output (the progress goes to ``mes.out``)."""
    await mes.configure()
    async with anyio.create_task_group() as watching:
        watching.start_soon(mes.watch_queue)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(mes.follow, started)
            await mes.start_jobs()
        watching.cancel_scope.cancel()
    results = await mes.collect()
    elapsed = time.monotonic() - started
    if as_json:
        document = summary_document(results, mes.progress, elapsed, mes.jobs)
        print(json.dumps(document, indent=2, default=str), flush=True)
    else:
        mes.out.print(summary(results, mes.progress, elapsed, keep=mes.keep_jobs))
    completed = all(
        result.get("JobState", [{}])[0].get("StateText", {}).get("Text") == TopState.ENDED
        for result in results.values()
    )
    return 0 if completed and len(results) == mes.jobs else 1
