"""Soak: does a station that runs for months stay bounded by its work in progress?

Everything is a real process on loopback: a private ``redis-server`` and ``mosquitto``, two
gateway instances (``gateway run``, role ``all``), the simulated station in a process of its
own (``gateway run --role simulator``: positioner, tightener, camera over MQTT, heartbeating).
This process is a steady MES: ``--concurrency`` workers each StoreAndStart a rear-axle job,
ask for its Job Response until it has ended, read it once more and Clear it, and start the
next. Every ``--kill-every`` seconds instance ``b`` is killed with SIGKILL and started again
``--restart-after`` seconds later, as under a supervisor; instance ``a`` lives throughout, the
long-lived process whose memory tells a leak.

Every ``--sample-every`` seconds it samples each process's RSS and open file descriptors
(``/proc``), and Redis's ``used_memory``, its key count and its de-duplication markers (the
ones of no scope are the heartbeats' kind). At the end it prints the growth per hour of each
figure after ``--warmup`` seconds (least squares over the samples; for ``b``, over each life of
the process after its own warm-up, the median), the jobs stored, ended and cleared, the jobs
lost (stored, never seen ended) and the jobs ended twice (two end records on the change stream,
which this process follows from the start), and what ``gateway store usage`` says one ended
job costs with the retention of the run.

Retention is short by default (``--retention`` seconds for ended jobs' engine state, traces
and de-duplication markers), so Redis reaches its plateau within the run: after ``retention``
seconds the keys of ended jobs expire as fast as new ones come, and the growth of keys and
memory after that is what the run checks; the scope's change stream is capped by length
(``--change-stream-maxlen``, ``redis.change_stream_maxlen``), not by time, so the growth of
Redis is measured once it is near its cap too (its filling is no leak).

    python benchmarks/soak.py [--minutes 30] [--concurrency 4] [--kill-every 300]
        [--retention 120] [--change-stream-maxlen 10000] [--json FILE]

``--json`` writes the figures (the CI test ``tests/benchmarks/test_soak.py`` runs a short soak
and asserts on them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
from redis.asyncio import Redis

from gateway.cloudevents import CloudEvent
from gateway.testing.mqtt import connect_test_client
from gateway.testing.processes import GatewayProcess
from gateway.testing.services import ServerProcess, free_port, mosquitto, redis_server
from gateway_jobs.testing import JobsMes, job_order, state_texts, work_master

T = TypeVar("T")

SCOPE = "cell1"
PREFIX = "soak"
DATASCHEMA = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
WORKMASTER = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1"
RECIPE = Path(__file__).parents[1] / "examples" / "recipes" / "rear_axle.json"
EQUIPMENT = ("positioner", "tightener", "camera")
END_STATES = ("Ended", "Aborted")
DUPLICATE = 16  # ReturnStatus: job not accepted (here: the job order exists)
MB = 1024 * 1024


# -- the station ---------------------------------------------------------------------------------


@dataclass
class Station:
    directory: Path
    redis: ServerProcess
    broker: ServerProcess
    retention: int
    capacity: int  # jobs the scope runs at once: the MES's workers
    change_stream_maxlen: int
    gateways: dict[str, GatewayProcess] = field(default_factory=dict)
    simulator: GatewayProcess | None = None

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/0"

    @property
    def mqtt_url(self) -> str:
        return f"mqtt://127.0.0.1:{self.broker.port}"

    def environ(self) -> dict[str, str]:
        retention = str(self.retention)
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": PREFIX,
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": PREFIX,
            "GATEWAY_MQTT_SESSION_EXPIRY_SECONDS": "300",
            "GATEWAY_JOBS_TOPIC_PREFIX": PREFIX,
            "GATEWAY_GATEWAY_DATA_DIR": str(self.directory / "data"),
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            # A killed instance's work is taken over in seconds, not the production minute.
            "GATEWAY_RUNTIME_CLAIM_IDLE_SECONDS": "3",
            "GATEWAY_RUNTIME_RECONCILE_SECONDS": "5",
            # Retention short enough to reach the plateau within the run.
            "GATEWAY_RUNTIME_ENDED_TTL_SECONDS": retention,
            "GATEWAY_UI_TRACE_KEPT_SECONDS": retention,
            "GATEWAY_REDIS_DEDUPE_TTL_SECONDS": retention,
            "GATEWAY_REDIS_CHANGE_STREAM_MAXLEN": str(self.change_stream_maxlen),
            "GATEWAY_MQTT_EQUIPMENT_TOPIC_PREFIX": f"{PREFIX}-sim",
            "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": ",".join(EQUIPMENT),
            "GATEWAY_SIMULATOR_TOPIC_PREFIX": f"{PREFIX}-sim",
            "GATEWAY_SIMULATOR_HEARTBEAT_SECONDS": "1",
            "GATEWAY_SIMULATOR_SEED": "1",
            # The station runs what the MES's workers keep in progress: the gateways' per-job
            # caches are sized from it.
            "GATEWAY_JOBS_MAX_RUNNING_JOB_ORDERS": str(self.capacity),
            "GATEWAY_JOBS_EQUIPMENT_ALLOCATION": "false",
        }

    def start(self) -> None:
        base = self.environ()
        for instance in ("a", "b"):
            environ = {
                **base,
                "GATEWAY_GATEWAY_INSTANCE_ID": f"{PREFIX}-{instance}",
                "GATEWAY_HTTP_PORT": str(free_port()),
            }
            self.gateways[instance] = GatewayProcess(
                None,
                environ,
                self.directory / f"{instance}.log",
                ready_line=" started (role all)",
                arguments=("run",),
            )
        simulator = {
            **base,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{PREFIX}-sim",
            "GATEWAY_SIMULATOR_ENABLED": "true",
        }
        self.simulator = GatewayProcess(
            None,
            simulator,
            self.directory / "simulator.log",
            ready_line=" started (role simulator)",
            arguments=("run", "--role", "simulator"),
        )
        for process in self.processes().values():
            process.start()
        for process in self.processes().values():
            process.wait_ready()

    def processes(self) -> dict[str, GatewayProcess]:
        made: dict[str, GatewayProcess] = dict(self.gateways)
        if self.simulator is not None:
            made["simulator"] = self.simulator
        return made

    def stop(self) -> None:
        for process in self.processes().values():
            process.stop()


# -- the figures --------------------------------------------------------------------------------


@dataclass
class Sample:
    at: float  # seconds since the run began
    rss: dict[str, tuple[int, int]]  # process -> (pid, bytes)
    fds: dict[str, int]
    redis_memory: int
    redis_keys: int
    dedupe_markers: int
    global_markers: int  # markers of no scope: what heartbeats used to leave
    change_entries: int  # the scope's change stream: it grows to its cap, then stays
    jobs_ended: int = 0  # jobs this MES has seen ended so far


def _proc(pid: int) -> tuple[int, int] | None:
    """RSS bytes and open file descriptors of ``pid`` (``None``: it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE"), len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


async def _count(client: Redis, pattern: str) -> int:
    return sum([1 async for _ in client.scan_iter(match=pattern, count=1000)])


async def sample(station: Station, client: Redis, began: float) -> Sample:
    rss: dict[str, tuple[int, int]] = {}
    fds: dict[str, int] = {}
    for name, process in station.processes().items():
        if process.process is None or process.returncode is not None:
            continue
        figures = _proc(process.process.pid)
        if figures is not None:
            rss[name] = (process.process.pid, figures[0])
            fds[name] = figures[1]
    memory = await client.info("memory")
    return Sample(
        at=time.monotonic() - began,
        rss=rss,
        fds=fds,
        redis_memory=int(memory["used_memory"]),
        redis_keys=int(await client.dbsize()),
        dedupe_markers=await _count(client, f"{PREFIX}:*:dedupe:*"),
        global_markers=await _count(client, f"{PREFIX}:{{_global}}:dedupe:*"),
        change_entries=int(await client.xlen(f"{PREFIX}:{{{SCOPE}}}:changes")),
    )


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value), per hour; ``None`` with fewer than 3 points."""
    if len(points) < 3:
        return None
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread * 3600


def process_growth(
    samples: list[Sample], name: str, warmup: float, figure: Callable[[Sample], float | None]
) -> float | None:
    """Growth per hour of one process's figure: over each life (pid) after its warm-up, the
    median of the lives long enough to tell."""
    lives: dict[int, list[tuple[float, float]]] = {}
    starts: dict[int, float] = {}
    for item in samples:
        if name not in item.rss:
            continue
        pid = item.rss[name][0]
        starts.setdefault(pid, item.at)
        value = figure(item)
        if value is not None and item.at - starts[pid] >= warmup:
            lives.setdefault(pid, []).append((item.at, value))
    slopes = [s for s in (slope_per_hour(points) for points in lives.values()) if s is not None]
    return statistics.median(slopes) if slopes else None


# -- the MES ------------------------------------------------------------------------------------


@dataclass
class Tally:
    stored: set[str] = field(default_factory=set)
    seen_ended: dict[str, str] = field(default_factory=dict)  # job -> its final state
    cleared: set[str] = field(default_factory=set)
    endings: Counter[str] = field(default_factory=Counter)  # end records on the change stream
    refused: list[str] = field(default_factory=list)  # StoreAndStart refused (why)
    # StoreAndStart sent again after no answer, refused as a duplicate: the first was stored.
    stored_when_unanswered: list[str] = field(default_factory=list)
    unanswered: int = 0  # calls that timed out and were sent again (an instance was down)
    kills: int = 0
    failed_starts: int = 0  # restarts that exited at once (and were tried again)


async def patiently(request: Callable[[], Awaitable[T]], tally: Tally, tries: int = 60) -> T:
    """A call sent again (the same event: the same id) while no instance answers it."""
    for _ in range(tries - 1):
        try:
            return await request()
        except TimeoutError:
            tally.unanswered += 1
    return await request()


async def run_job(mes: JobsMes, job: str, tally: Tally, give_up: float) -> None:
    store = mes.event(
        "org.opcfoundation.ISA95-JOBCONTROL_V2.StoreAndStart.v2",
        {"JobOrder": job_order(job, work_masters=["WM"])},
    )
    sent = 0

    async def send_store() -> CloudEvent:
        nonlocal sent
        sent += 1
        return await mes.client.request(mes.commands_topic, store, timeout=5)

    reply = await patiently(send_store, tally)
    status = reply.data.get("ReturnStatus")
    if status == DUPLICATE and sent > 1 and "duplicate" in (reply.errormessage or ""):
        # The instance that stored it died before it could mark the call done, so the call
        # sent again ran again and found the job: stored, as this MES meant (counted).
        tally.stored_when_unanswered.append(job)
    elif status != 1:
        tally.refused.append(f"{job}: {reply.errorcode or reply.data} {reply.errormessage}")
        return
    tally.stored.add(job)
    deadline = time.monotonic() + give_up
    while time.monotonic() < deadline:
        response = await patiently(lambda: mes.job_response(job), tally)
        texts = state_texts(response.data.get("JobResponse") or {})
        if texts and texts[0] in END_STATES:
            tally.seen_ended[job] = "/".join(texts[:2])
            break
        await anyio.sleep(0.3)
    else:
        return  # lost: counted at the end
    await patiently(lambda: mes.job_response(job), tally)  # the MES reads the result
    clear = mes.event("org.opcfoundation.ISA95-JOBCONTROL_V2.Clear.v2", {"JobOrderID": job})
    cleared = await patiently(
        lambda: mes.client.request(mes.commands_topic, clear, timeout=5), tally
    )
    if cleared.data.get("ReturnStatus") == 1:
        tally.cleared.add(job)


async def follow_endings(client: Redis, tally: Tally, stop: anyio.Event) -> None:
    """Count the end records of every job on the scope's change stream, from the start."""
    key = f"{PREFIX}:{{{SCOPE}}}:changes"
    cursor = "0-0"
    while not stop.is_set():
        reply = await client.xread({key: cursor}, count=500, block=500)
        for _, entries in cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], reply or []):
            for entry_id, fields in entries:
                cursor = entry_id
                if fields.get("state", "").startswith(END_STATES) and fields.get("job_order_id"):
                    tally.endings[fields["job_order_id"]] += 1


async def restart(process: GatewayProcess, tally: Tally) -> None:
    """Start ``process`` again, as a supervisor does; one that exits at start (its HTTP port
    taken meanwhile by another program of the machine) gets another port and another try."""
    while True:
        process.start()
        while not process.ready() and process.returncode is None:  # noqa: ASYNC110 (a log)
            await anyio.sleep(0.2)
        if process.returncode is None:
            return
        tally.failed_starts += 1
        process.starts -= 1  # it wrote no ready line: ``ready`` counts the others
        process.environ["GATEWAY_HTTP_PORT"] = str(free_port())


async def _within(scope: anyio.CancelScope, work: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await work()


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Options:
    seconds: float
    concurrency: int
    kill_every: float
    restart_after: float
    sample_every: float
    warmup: float
    retention: int
    drain: float
    change_stream_maxlen: int = 10000


async def soak(options: Options, directory: Path) -> dict[str, Any]:
    (directory / "redis").mkdir()
    (directory / "mosquitto").mkdir()
    station = Station(
        directory,
        redis_server(directory / "redis"),
        mosquitto(directory / "mosquitto"),
        options.retention,
        options.concurrency,
        options.change_stream_maxlen,
    )
    station.redis.start()
    station.broker.start()
    try:
        station.start()
        return await _drive(station, options)
    finally:
        station.stop()
        station.redis.stop()
        station.broker.stop()


async def _drive(station: Station, options: Options) -> dict[str, Any]:
    tally = Tally()
    samples: list[Sample] = []
    client = Redis.from_url(station.redis_url, decode_responses=True)
    began = time.monotonic()
    issuing = anyio.Event()  # set: no more jobs are started
    finished = anyio.Event()  # set: the run is over
    async with client, connect_test_client(station.mqtt_url) as mqtt:
        mes = JobsMes(mqtt, PREFIX, SCOPE)
        recipe = json.loads(RECIPE.read_text())
        config = mes.event(WORKMASTER, work_master("WM", recipe, dataschema=DATASCHEMA))
        await patiently(lambda: mqtt.request(mes.commands_topic, config, timeout=5), tally)
        counter = iter(range(10**9))

        async def worker() -> None:
            while not issuing.is_set():
                await run_job(mes, f"S{next(counter):07d}", tally, give_up=options.drain)

        async def killer() -> None:
            # Kills on a fixed schedule from the start, so a slow restart (a loaded machine)
            # delays the next kill rather than the whole schedule.
            victim = station.gateways["b"]
            for kill in itertools.count(1):
                await anyio.sleep(max(0.0, began + kill * options.kill_every - time.monotonic()))
                victim.kill()
                tally.kills += 1
                await anyio.sleep(options.restart_after)
                await restart(victim, tally)

        async def sampler() -> None:
            while not finished.is_set():
                taken = await sample(station, client, began)
                taken.jobs_ended = len(tally.seen_ended)
                samples.append(taken)
                with anyio.move_on_after(options.sample_every):
                    await finished.wait()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow_endings, client, tally, finished)
            tasks.start_soon(sampler)
            killing = anyio.CancelScope()
            tasks.start_soon(_within, killing, killer)
            # Workers finish the job they run once no more are issued.
            with anyio.move_on_after(options.seconds + options.drain + 60):
                async with anyio.create_task_group() as work:
                    for _ in range(options.concurrency):
                        work.start_soon(worker)
                    await anyio.sleep(options.seconds)
                    issuing.set()
            killing.cancel()
            # The end records of the last jobs reach the follower; then the figures stop.
            await anyio.sleep(1.0)
            finished.set()
        usage = await store_usage(station)
    return report(station, options, tally, samples, usage)


async def store_usage(station: Station) -> dict[str, Any]:
    """``gateway store usage --json`` against the run's Redis, as an operator would ask."""
    environ = {**station.gateways["a"].environ, "GATEWAY_GATEWAY_INSTANCE_ID": f"{PREFIX}-usage"}
    command = [sys.executable, "-m", "gateway.cli", "store", "usage", "--json"]
    done = await anyio.run_process(command, env=environ, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.decode(errors="replace")[-2000:]}
    return cast(dict[str, Any], json.loads(done.stdout))


def report(
    station: Station,
    options: Options,
    tally: Tally,
    samples: list[Sample],
    usage: dict[str, Any],
) -> dict[str, Any]:
    warm = [item for item in samples if item.at >= options.warmup]
    plateau = redis_plateau(samples, options)
    processes: dict[str, Any] = {}
    for name in station.processes():

        def rss(item: Sample, name: str = name) -> float:
            return item.rss[name][1]

        def fds(item: Sample, name: str = name) -> float | None:
            return item.fds.get(name)

        processes[name] = {
            "rss_mb_per_hour": _mb(process_growth(samples, name, options.warmup, rss)),
            "fds_per_hour": process_growth(samples, name, options.warmup, fds),
            **_first_and_last(samples, name, options.warmup),
        }
    lost = sorted(job for job in tally.stored if job not in tally.seen_ended)
    doubled = sorted(job for job, count in tally.endings.items() if count > 1)
    last = samples[-1] if samples else None
    return {
        "seconds": options.seconds,
        "concurrency": options.concurrency,
        "retention_seconds": options.retention,
        "kills": tally.kills,
        "failed_starts": tally.failed_starts,
        "jobs": {
            "stored": len(tally.stored),
            "ended": len(tally.seen_ended),
            "cleared": len(tally.cleared),
            "completed": sum(1 for s in tally.seen_ended.values() if s == "Ended/Completed"),
            "lost": lost,
            "ended_twice": doubled,
            "refused": tally.refused[:20],
            "stored_when_unanswered": tally.stored_when_unanswered,
            "calls_sent_again": tally.unanswered,
            "completion_logged_twice": completions_logged_twice(station),
            "per_second": round(len(tally.seen_ended) / options.seconds, 2),
        },
        "processes": processes,
        "redis": {
            "memory_mb_per_hour": _mb(
                slope_per_hour([(s.at, s.redis_memory) for s in plateau or warm])
            ),
            "keys_per_hour": slope_per_hour([(s.at, s.redis_keys) for s in plateau or warm]),
            "memory_mb_last": round(last.redis_memory / MB, 2) if last else None,
            "keys_last": last.redis_keys if last else None,
            "keys_most": max((s.redis_keys for s in samples), default=None),
            "dedupe_markers_last": last.dedupe_markers if last else None,
            "global_markers_most": max((s.global_markers for s in samples), default=None),
            # Keys without a TTL at the end, every job cleared: what lasts for ever.
            "lasting_keys": usage["keys"] - usage["expiring_keys"] if "keys" in usage else None,
            "measured_from_second": round((plateau or warm)[0].at) if (plateau or warm) else None,
            "keys_over_retention_most": keys_over_retention(
                samples, plateau, usage, options.concurrency
            ),
        },
        "store_usage": usage,
        "samples": len(samples),
        # What the figures per hour are fitted to: seconds, RSS MB of a, Redis MB and keys.
        "series": [
            [
                round(item.at),
                round(item.rss["a"][1] / MB, 2) if "a" in item.rss else None,
                round(item.redis_memory / MB, 2),
                item.redis_keys,
            ]
            for item in samples
        ],
    }


def keys_over_retention(
    samples: list[Sample], plateau: list[Sample], usage: dict[str, Any], workers: int
) -> float | None:
    """The most keys Redis held over what the retention implies at that moment: the jobs
    ended within the last ``kept_seconds`` times an ended job's keys (``gateway store
    usage``), plus the keys that last and the jobs in progress' own (at most twice an ended
    job's, per MES worker: the pace of the run changes, so the count of keys does too).
    1.0: as implied; a leak makes it grow past that as the run goes on."""
    per_job = usage.get("per_job")
    if not per_job or not plateau:
        return None
    kept, keys_per_job = float(per_job["kept_seconds"]), float(per_job["keys"])
    lasting = int(usage["keys"]) - int(usage["expiring_keys"])
    ratios: list[float] = []
    for item in plateau:
        before = next((s for s in reversed(samples) if s.at <= item.at - kept), samples[0])
        ended_within = item.jobs_ended - before.jobs_ended
        in_progress = 2 * keys_per_job * workers
        implied = keys_per_job * ended_within + lasting + in_progress
        ratios.append(item.redis_keys / implied)
    return round(max(ratios), 2)


def redis_plateau(samples: list[Sample], options: Options) -> list[Sample]:
    """The samples where Redis holds what the retention implies: after the warm-up and one
    retention, and once the change stream has reached its cap (it fills at the pace of the
    jobs, 10,000 entries in some minutes, then is trimmed: its growth until then is no leak)."""
    full = next(
        (item.at for item in samples if item.change_entries >= 0.9 * options.change_stream_maxlen),
        None,
    )
    start = options.warmup + options.retention
    if full is not None:
        start = max(start, full)
    return [item for item in samples if item.at >= start]


def completions_logged_twice(station: Station) -> list[str]:
    """Jobs whose recipe end the instances logged more than once ("recipe completed"): a
    completion reported twice (refused by job management, so not ended twice)."""
    seen: Counter[str] = Counter()
    for process in station.gateways.values():
        if not process.log.exists():
            continue
        with process.log.open(errors="replace") as lines:
            for line in lines:
                if ": recipe completed" in line:
                    job = line.split(": recipe completed")[0].rpartition("/")[2]
                    seen[job] += 1
    return sorted(job for job, count in seen.items() if count > 1)


def _first_and_last(samples: list[Sample], name: str, warmup: float) -> dict[str, Any]:
    """RSS and fds of the process's last life: after its warm-up (or its first sample) and now."""
    alive = [item for item in samples if name in item.rss]
    if not alive:
        return {"rss_mb_warm": None, "rss_mb_last": None, "fds_warm": None, "fds_last": None}
    pid = alive[-1].rss[name][0]
    life = [item for item in alive if item.rss[name][0] == pid]
    warm = next((item for item in life if item.at - life[0].at >= warmup), life[0])
    return {
        "rss_mb_warm": round(warm.rss[name][1] / MB, 1),
        "rss_mb_last": round(life[-1].rss[name][1] / MB, 1),
        "fds_warm": warm.fds.get(name),
        "fds_last": life[-1].fds.get(name),
    }


def _mb(value: float | None) -> float | None:
    return None if value is None else round(value / MB, 2)


def print_report(figures: dict[str, Any]) -> None:
    jobs = figures["jobs"]
    print(
        f"soak: {figures['seconds'] / 60:.1f} min, {figures['concurrency']} MES workers, "
        f"{figures['kills']} SIGKILLs of instance b ({figures['failed_starts']} restarts failed "
        f"and were tried again), retention {figures['retention_seconds']} s"
    )
    print(
        f"jobs: {jobs['stored']} stored, {jobs['ended']} ended ({jobs['completed']} completed), "
        f"{jobs['cleared']} cleared, {jobs['per_second']}/s; lost {len(jobs['lost'])}, "
        f"ended twice {len(jobs['ended_twice'])}; calls sent again {jobs['calls_sent_again']} "
        f"(a StoreAndStart found stored when sent again: {len(jobs['stored_when_unanswered'])}); "
        f"chart completion logged twice for {len(jobs['completion_logged_twice'])}"
    )
    print(f"{'process':<10} {'RSS MB/h':>10} {'fds/h':>8} {'RSS MB now':>11}")
    for name, figures_of in figures["processes"].items():
        print(
            f"{name:<10} {_text(figures_of['rss_mb_per_hour']):>10} "
            f"{_text(figures_of['fds_per_hour']):>8} {_text(figures_of['rss_mb_last']):>11}"
        )
    redis = figures["redis"]
    print(
        f"redis (from second {redis['measured_from_second']}): "
        f"memory {_text(redis['memory_mb_per_hour'])} MB/h, keys {_text(redis['keys_per_hour'])}/h;"
        f" now {redis['memory_mb_last']} MB, {redis['keys_last']} keys (most "
        f"{redis['keys_most']}); de-duplication markers {redis['dedupe_markers_last']}, "
        f"of no scope (heartbeats) at most {redis['global_markers_most']}; keys without a TTL "
        f"(every job cleared) {redis['lasting_keys']}; keys held at most "
        f"{redis['keys_over_retention_most']} x what the retention implies"
    )
    usage = figures["store_usage"]
    if "per_job" in usage:
        per_job = usage["per_job"]
        print(
            f"store usage: an ended job {per_job['keys']} keys, {per_job['bytes']} bytes, kept "
            f"{per_job['kept_seconds']} s; at {jobs['per_second']} jobs/s that is "
            f"{round(jobs['per_second'] * per_job['kept_seconds'] * per_job['keys'])} keys held"
        )
    else:
        print(f"store usage: {usage}")


def _text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=300.0, help="seconds")
    parser.add_argument("--restart-after", type=float, default=5.0, help="seconds")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds")
    parser.add_argument("--retention", type=int, default=120, help="seconds")
    parser.add_argument("--drain", type=float, default=90.0, help="seconds a job may take")
    parser.add_argument(
        "--change-stream-maxlen", type=int, default=10000, help="redis.change_stream_maxlen"
    )
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    arguments = parser.parse_args()
    options = Options(
        seconds=arguments.minutes * 60,
        concurrency=arguments.concurrency,
        kill_every=arguments.kill_every,
        restart_after=arguments.restart_after,
        sample_every=arguments.sample_every,
        warmup=arguments.warmup,
        retention=arguments.retention,
        drain=arguments.drain,
        change_stream_maxlen=arguments.change_stream_maxlen,
    )
    directory = Path(tempfile.mkdtemp(prefix="gw-soak-"))
    try:
        figures = anyio.run(soak, options, directory)
    finally:
        if arguments.keep:
            print(f"logs in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print_report(figures)
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
