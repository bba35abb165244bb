"""The MES outage of the publishing design, as a scenario any broker and station can be put to.

The MicroDCS design's acceptance test: the MES is disconnected (for 30 minutes in the design)
while jobs run through complete cycles, clearable states included; it reconnects and must see
the ``seq`` gap, find every retained topic and lose no response. ``mes_outage`` plays it over
MQTT only:

1. the MES (connected) stores ``jobs`` job orders with StoreAndStart, their ``StartTime`` spread
   over the coming outage, so they run during it one after another, then reads the state index
   and remembers its ``seq`` and ``epoch``;
2. the MES disconnects; an observer of the plant (not the MES: the status events topic) notes how
   each job ends (Ended or Aborted); the outage lasts ``outage_seconds`` and at least until every
   job has ended;
3. the MES reconnects with what it saw last: the index must show a gap in ``seq`` (same epoch),
   list every job with ``has_result``; every order and result must be retained; it records each
   result, Clears the job, and the index must end without them.

``benchmarks/mes_outage.py`` runs it at full length against a station of its own and prints the
report; ``tests/e2e/test_mes_outage.py`` runs it with a 60 s outage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from anyio.abc import TaskStatus

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt
from gateway.jobstates import TopState
from gateway.testing.mes import Gap, MesClient, MesError
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.topics import MES_REPLY_PREFIX, MesTopics

STORE_AND_START = "org.opcfoundation.ISA95-JOBCONTROL_V2.StoreAndStart.v2"
STATUS_EVENT = "org.opcfoundation.ISA95-JOBCONTROL_V2.ISA95JobOrderStatusEventType.v2"
CLEARABLE = (TopState.ENDED.value, TopState.ABORTED.value)


@dataclass
class OutageReport:
    """What the scenario saw and checked; ``problems`` empty means it passed."""

    jobs: list[str]
    outage_seconds: float = 0.0
    ended_during_outage: dict[str, str] = field(default_factory=dict)  # job -> Ended/Aborted
    ended_before_disconnect: int = 0  # of those, ended while the MES was still there
    seq_before: int = 0
    epoch_before: str = ""
    seq_after: int = 0
    gap: Gap | None = None
    orders_retained: int = 0
    results_retained: int = 0
    cleared: int = 0
    index_drained: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        ends: dict[str, int] = {}
        for state in self.ended_during_outage.values():
            ends[state] = ends.get(state, 0) + 1
        summary = ", ".join(f"{count} {state}" for state, count in sorted(ends.items()))
        return [
            f"MES offline for {self.outage_seconds:.0f} s while {len(self.jobs)} jobs ran "
            f"({summary or 'none ended'}; {self.ended_before_disconnect} before it left)",
            f"state index before: seq {self.seq_before}, epoch {self.epoch_before}",
            f"state index after:  seq {self.seq_after}, gap {self.gap}",
            f"retained on reconnect: {self.orders_retained}/{len(self.jobs)} orders, "
            f"{self.results_retained}/{len(self.jobs)} results",
            f"cleared {self.cleared}/{len(self.jobs)}; index drained: {self.index_drained}",
            "verified: OK" if self.ok else "problems: " + "; ".join(self.problems),
        ]


async def mes_outage(
    mes_url: str,
    scope: str,
    work_master_id: str,
    *,
    jobs: int,
    outage_seconds: float,
    prefix: str = "jobs",
    observer_url: str | None = None,
    job_prefix: str = "OUT",
    reply_prefix: str = MES_REPLY_PREFIX,
    progress: Callable[[str], None] = lambda _: None,
    timeout: float = 30.0,
) -> OutageReport:
    """Play the outage against the station reached at ``mes_url`` (a gateway with its publisher
    and a Work Master ``work_master_id`` whose jobs end by themselves must be running).

    ``observer_url``: how the plant's observer logs in (default: as the MES). ``timeout``: how
    long any one step may take beyond the outage itself.
    """
    topics = MesTopics(prefix)
    names = [f"{job_prefix}-{number:04d}" for number in range(jobs)]
    report = OutageReport(names)
    lead = 5.0 + 0.25 * jobs  # storing them all before the first one is due
    begins = datetime.now(UTC) + timedelta(seconds=lead)
    spacing = outage_seconds / max(jobs, 1)
    plant_url = observer_url or mes_url
    all_ended = anyio.Event()
    async with (
        connect_test_client(plant_url, reply_prefix=reply_prefix) as plant,
        anyio.create_task_group() as observing,
    ):
        # The plant's observer follows every job's end from before the first one is stored.
        await observing.start(_observe, plant, topics, scope, names, report, progress, all_ended)
        async with connect_test_client(mes_url, reply_prefix=reply_prefix) as client:
            mes = MesClient(client, prefix, scope)
            starts = [begins + timedelta(seconds=spacing * (n + 0.25)) for n in range(jobs)]
            slots = anyio.Semaphore(8)

            async def store(name: str, start: datetime) -> None:
                async with slots:
                    await _store_and_start(
                        client, topics, scope, name, work_master_id, start, timeout
                    )

            async with anyio.create_task_group() as storing:
                for name, start in zip(names, starts, strict=True):
                    storing.start_soon(store, name, start)
            progress(f"stored {jobs} jobs, due from {begins:%H:%M:%S} every {spacing:.1f} s")
            seen = await mes.follow(lambda index: all(index.job(n) for n in names), timeout=timeout)
            before = seen[-1][0]
            report.seq_before, report.epoch_before = before.seq, before.epoch
            report.ended_before_disconnect = len(report.ended_during_outage)
        progress(f"MES disconnected at seq {report.seq_before}")
        disconnected = time.monotonic()
        # Every job is due by ``begins`` + the outage; each may then take up to ``timeout``.
        due = (begins - datetime.now(UTC)).total_seconds() + outage_seconds
        with anyio.fail_after(max(due, 0.0) + timeout):
            await all_ended.wait()
        observing.cancel_scope.cancel()
    await anyio.sleep(max(0.0, outage_seconds - (time.monotonic() - disconnected)))
    report.outage_seconds = time.monotonic() - disconnected
    progress(f"MES reconnects after {report.outage_seconds:.0f} s")
    async with connect_test_client(mes_url, reply_prefix=reply_prefix) as client:
        mes = MesClient(client, prefix, scope, report.seq_before, report.epoch_before)
        await _reconnect(mes, names, report, timeout)
    return report


async def _store_and_start(
    client: MqttTestClient,
    topics: MesTopics,
    scope: str,
    name: str,
    work_master_id: str,
    start: datetime,
    timeout: float,
) -> None:
    order = {
        "JobOrderID": name,
        "WorkMasterID": [{"ID": work_master_id}],
        "StartTime": start.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    event = CloudEvent(
        type=STORE_AND_START, source="urn:test:mes", subject=scope, data={"JobOrder": order}
    )
    reply = await client.request(topics.commands(scope), event, timeout=timeout)
    status = reply.data.get("ReturnStatus") if isinstance(reply.data, dict) else None
    if status != 1:
        raise RuntimeError(f"StoreAndStart {name} refused: {reply.errormessage or reply.data}")


async def _observe(
    plant: MqttTestClient,
    topics: MesTopics,
    scope: str,
    names: list[str],
    report: OutageReport,
    progress: Callable[[str], None],
    all_ended: anyio.Event,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Follow the status events (subscribed when started) and set ``all_ended`` once every job
    has ended (Ended or Aborted)."""
    wanted = set(names)
    async with plant.watch(topics.events(scope)) as events:
        task_status.started()
        async for message in events:
            job, state = _job_state(from_mqtt(message))
            if job in wanted and state in CLEARABLE and job not in report.ended_during_outage:
                report.ended_during_outage[job] = state
                progress(f"{job} {state} ({len(report.ended_during_outage)}/{len(names)})")
            if wanted <= report.ended_during_outage.keys():
                all_ended.set()


def _job_state(event: CloudEvent) -> tuple[str, str]:
    data: Any = event.data if event.type == STATUS_EVENT else None
    if not isinstance(data, dict):
        return "", ""
    order = data.get("JobOrder") or {}
    states = data.get("JobState") or [{}]
    text = (states[0].get("StateText") or {}).get("Text", "")
    return str(order.get("JobOrderID", "")), str(text)


async def _reconnect(
    mes: MesClient, names: list[str], report: OutageReport, timeout: float
) -> None:
    problems = report.problems
    index = await mes.index(timeout=timeout)
    if index is None:
        problems.append("no retained state index on reconnect")
        return
    report.seq_after = index.seq
    report.gap = mes.compare(index)
    mes.last_seq, mes.last_epoch = report.seq_before, report.epoch_before  # resync compares again
    if report.gap.kind != "missed" or report.gap.missed < 1:
        problems.append(f"expected a seq gap in the same epoch, got {report.gap}")
    for name in names:
        listed = index.job(name)
        if listed is None or not listed.has_result:
            problems.append(f"{name} not listed with has_result: {listed}")
        elif listed.top_state != report.ended_during_outage.get(name):
            problems.append(f"{name}: index says {listed.top_state}")
    orders = await mes.retained("order", names, timeout=timeout)
    report.orders_retained = len(orders.keys() & set(names))
    try:
        resync = await mes.resync(timeout=timeout)
    except MesError as error:
        problems.append(f"resync failed: {error}")
        return
    report.results_retained = len(resync.results.keys() & set(names))
    report.cleared = len(set(resync.cleared) & set(names))
    for name in names:
        result = resync.results.get(name)
        if not isinstance(result, dict) or result.get("JobOrderID") != name:
            problems.append(f"result of {name} lost: {result!r}"[:200])
            continue
        state = (result.get("JobState") or [{}])[0].get("StateText", {}).get("Text")
        if state != report.ended_during_outage.get(name):
            problems.append(f"result of {name} says {state}")
    if report.orders_retained != len(names):
        problems.append(f"orders retained: {report.orders_retained}/{len(names)}")
    if report.cleared != len(names):
        problems.append(f"cleared {report.cleared}/{len(names)}")
    try:
        await mes.follow(lambda index: not any(index.job(n) for n in names), timeout=timeout)
        report.index_drained = True
    except TimeoutError:
        problems.append("the cleared jobs are still in the state index")
