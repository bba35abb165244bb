"""Benchmark: the step path end to end, against raw MQTT request/reply in the same run.

Everything is a real process on loopback: a private ``redis-server``, a private ``mosquitto``
(``set_tcp_nodelay true``), the gateway (``gateway run``, every role in one process), and
equipment in a process of its own (paho) that answers every command at once on its Response
Topic. This process is the MES: at each level of concurrency it keeps that many jobs going,
each StoreAndStart -> Ended (status event) -> Clear, on a recipe of ``--steps`` ``push_command``
steps with ``--timeout`` second action timeouts.

Before each level, the same responder answers raw MQTT v5 QoS 1 requests from a paho client
here, as many in flight as the level has jobs: the baseline the gateway is compared with. Then
``benchmarks/stack_floor.py`` runs as many jobs on the same libraries as the gateway doing only
what a step must (receive, one Redis script, publish): the most a gateway process could reach.

Printed per level: steps/s and the ratio to raw MQTT, step time p50/p99 (from one command of
a job to its next, as the equipment sees it) and what the gateway adds to a raw round trip,
Redis commands per step (INFO commandstats) and MQTT PUBLISH packets per step (mosquitto's
$SYS counters, every client included), the StoreAndStart reply latency (of the calls sent in
the window), the gateway's CPU per step, and the jobs that aborted; then the gateway against
the floor (issue 37's targets): CPU per step at most 2x the floor's, steps/s at least 0.5x,
and the step period's p50 and p99 above the floor's.

    python benchmarks/step_path.py [--levels 1,10,40,200] [--seconds 10] [--steps 10] [--repeat 3]
        [--roles all | jobs,engine,publisher] [--gateways 2] [--action-seconds 1] [--topics]

``--roles`` runs the gateway as one process per role (its CPU is then the sum of theirs);
``--gateways N`` runs N of them (each an instance of its own, sharing the work).
``--action-seconds`` makes the equipment take that long per action (a station's pace: at 200
jobs, about 200 steps/s offered), for the StoreAndStart latency and the aborts under load.
``--topics`` lists the MQTT messages per step and per job by topic. Figures and the cost model:
``docs/performance.md``.

The figures of one run move by a fifth from run to run on a shared 2-core machine: ``--repeat``
runs the levels several times over and ends with a table of each figure's median.
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from redis import Redis

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt
from gateway.equipment import CorrelationId
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.testing.processes import GatewayProcess
from gateway.testing.services import ServerProcess, free_port, mosquitto, redis_server
from gateway_jobs.roles import MES_ROLES as JOB_MANAGEMENT_ROLES
from gateway_sfc.testing import linear_recipe

EQUIPMENT_PREFIX = "bench-eq"
JOBS_PREFIX = "bench-jobs"
SCOPE = "cell1"
RAW_TOPIC = "bench-raw/commands"
DATASCHEMA = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
STORE_AND_START = "org.opcfoundation.ISA95-JOBCONTROL_V2.StoreAndStart.v2"
CLEAR = "org.opcfoundation.ISA95-JOBCONTROL_V2.Clear.v2"
CONFIG_WORKMASTER = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1"


# -- the equipment: its own process, paho, answers at once ---------------------------------------


def _nodelay(client: paho.Client) -> None:
    sock = client.socket()
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _paho_client(name: str) -> paho.Client:
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=name,
        protocol=paho.MQTTv5,
        reconnect_on_failure=False,
    )
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    return client


class DelayedReplies:
    """Replies sent ``delay`` seconds after their command (a station's pace), by one thread."""

    def __init__(self, client: paho.Client, delay: float) -> None:
        self.client = client
        self.delay = delay
        self.due: list[tuple[float, int, str, bytes, Properties]] = []
        self.counter = iter(range(1 << 62))
        self.changed = threading.Condition()
        self.late: list[float] = []  # how long after its due time each reply went
        threading.Thread(target=self._run, daemon=True).start()

    def send(self, topic: str, payload: bytes, properties: Properties) -> None:
        if self.delay <= 0:
            self.client.publish(topic, payload, qos=1, properties=properties)
            return
        with self.changed:
            due = time.monotonic() + self.delay
            heapq.heappush(self.due, (due, next(self.counter), topic, payload, properties))
            self.changed.notify()

    def _run(self) -> None:
        while True:
            with self.changed:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.changed.wait(self.due[0][0] - time.monotonic() if self.due else None)
                due, _, topic, payload, properties = heapq.heappop(self.due)
            self.late.append(time.monotonic() - due)
            self.client.publish(topic, payload, qos=1, properties=properties)

    def lateness(self) -> str:
        """The replies' lateness, p50 / p99 / max (the equipment's own share of a step)."""
        late = sorted(self.late)
        if not late:
            return "no delayed replies"
        p50, p99 = late[len(late) // 2], late[int(0.99 * len(late))]
        worst = late[-1]
        return f"replies late p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, max {worst * 1e3:.1f}"


def responder(
    port: int,
    answered: Any,
    ready: Any,
    pipe: multiprocessing.connection.Connection,
    action_seconds: float = 0.0,
) -> None:
    """Answer every command (at once, or ``action_seconds`` later); note, per job, when each
    command arrived.

    ``pipe``: the parent sends ``"take"`` and receives the step times (seconds between two
    commands of one job) noted since the last take.
    """
    last_command: dict[str, float] = {}
    step_times: list[float] = []
    lock = threading.Lock()
    client = _paho_client(f"bench-responder-{os.getpid()}")
    replies = DelayedReplies(client, action_seconds)

    def on_connect(client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        _nodelay(client)
        client.subscribe([(f"{EQUIPMENT_PREFIX}/+/commands", 1), (RAW_TOPIC, 1)])

    def on_subscribe(*args: Any) -> None:
        ready.set()

    def on_message(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        now = time.perf_counter()
        request = message.properties
        response_topic = getattr(request, "ResponseTopic", None)
        if not response_topic:
            return
        reply = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        correlation = getattr(request, "CorrelationData", b"")
        reply.CorrelationData = correlation
        if message.topic == RAW_TOPIC:
            client.publish(response_topic, message.payload, qos=1, properties=reply)
            return
        attributes = dict(getattr(request, "UserProperty", []))
        reply.ContentType = "application/json"
        reply.UserProperty = [
            ("specversion", "1.0"),
            ("id", uuid.uuid4().hex),
            ("source", "urn:bench:equipment"),
            ("type", attributes.get("type", "bench.reply")),
            ("subject", attributes.get("subject", "")),
        ]
        replies.send(response_topic, b'{"ok":true}', reply)
        answered.value += 1
        job = CorrelationId.parse(correlation.decode()).job
        with lock:
            previous = last_command.get(job)
            if previous is not None:
                step_times.append(now - previous)
            last_command[job] = now

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        while True:
            request = pipe.recv()
            if request == "stop":
                if action_seconds > 0:
                    print(f"equipment: {replies.lateness()}", file=sys.stderr, flush=True)
                break
            with lock:
                taken = list(step_times)
                step_times.clear()
                last_command.clear()
            pipe.send(taken)
    finally:
        client.disconnect()
        client.loop_stop()


# -- the baseline: raw MQTT v5 QoS 1 request/reply -----------------------------------------------


def raw_round_trips(port: int, in_flight: int, seconds: float) -> tuple[float, list[float]]:
    """Requests answered per second with ``in_flight`` outstanding, and each round trip."""
    client = _paho_client(f"bench-raw-{uuid.uuid4().hex[:8]}")
    reply_topic = f"bench-raw/replies/{client._client_id.decode()}"
    connected = threading.Event()
    sent_at: dict[bytes, float] = {}
    round_trips: list[float] = []
    measuring = threading.Event()
    stopping = threading.Event()
    lock = threading.Lock()
    counter = iter(range(1 << 62))

    def send() -> None:
        correlation = str(next(counter)).encode()
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ResponseTopic = reply_topic
        properties.CorrelationData = correlation
        sent_at[correlation] = time.perf_counter()
        client.publish(RAW_TOPIC, b'{"n":1}', qos=1, properties=properties)

    def on_connect(client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        _nodelay(client)
        client.subscribe(reply_topic, qos=1)

    def on_subscribe(*args: Any) -> None:
        connected.set()

    def on_message(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        started = sent_at.pop(bytes(getattr(message.properties, "CorrelationData", b"")), None)
        if started is not None and measuring.is_set():
            with lock:
                round_trips.append(time.perf_counter() - started)
        if not stopping.is_set():
            send()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        if not connected.wait(10):
            raise RuntimeError("raw MQTT client did not connect")
        for _ in range(in_flight):
            send()
        time.sleep(min(1.0, seconds / 4))  # warm up
        measuring.set()
        started = time.perf_counter()
        time.sleep(seconds)
        measuring.clear()
        elapsed = time.perf_counter() - started
        stopping.set()
        with lock:
            measured = list(round_trips)
        return len(measured) / elapsed, measured
    finally:
        time.sleep(0.2)
        client.disconnect()
        client.loop_stop()


def stack_floor(mqtt_port: int, redis_port: int, in_flight: int, seconds: float) -> Any:
    """The least a step can cost on the gateway's libraries: benchmarks/stack_floor.py."""
    script = Path(__file__).with_name("stack_floor.py")
    command = [sys.executable, str(script), "--mqtt-port", str(mqtt_port)]
    command += ["--redis-port", str(redis_port), "--in-flight", str(in_flight)]
    command += ["--seconds", str(seconds), "--topic", RAW_TOPIC]
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    return json.loads(output.stdout.splitlines()[-1])


# -- counters: Redis, mosquitto, CPU -----------------------------------------------------------


def redis_calls(client: Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def client_commands(
    port: int, seconds: float, answered: Any, log: Path | None = None
) -> tuple[Counter[str], int]:
    """Commands clients sent (not those scripts ran), by name, over ``seconds`` of MONITOR,
    and the steps answered meanwhile (INFO commandstats counts script calls too); ``log``:
    every command is also appended there, cut to 200 characters."""
    counts: Counter[str] = Counter()
    monitor = Redis(port=port)
    with monitor.monitor() as stream:  # type: ignore[no-untyped-call]
        before = answered.value
        deadline = time.monotonic() + seconds
        for line in stream.listen():
            if " lua" not in line["client_address"] and line["client_type"] != "lua":
                command = line["command"].split(" ", 1)[0].strip('"').lower()
                if command not in ("info", "monitor"):
                    counts[command] += 1
                    if log is not None:
                        with log.open("a") as lines:
                            lines.write(line["command"][:200] + "\n")
            if time.monotonic() > deadline:
                break
        steps = answered.value - before
    monitor.close()
    return counts, steps


def mes_call_buckets(http_port: int) -> dict[float, float]:
    """The gateway's own histogram of MES calls handled (``gateway_message_seconds`` of the
    ``jobs`` processor): cumulative count per upper bound."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("gateway_message_seconds_bucket{") and 'processor="jobs"' in line:
            labels, value = line.rsplit(" ", 1)
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(value)
    return buckets


def bucket_percentile(
    before: dict[float, float], after: dict[float, float], fraction: float
) -> float:
    """The upper bound of the bucket holding ``fraction`` of what was counted in between."""
    bounds = sorted(after)
    counts = [after[bound] - before.get(bound, 0.0) for bound in bounds]
    if not counts or counts[-1] <= 0:
        return float("nan")
    return next(b for b, c in zip(bounds, counts, strict=True) if c >= fraction * counts[-1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BrokerCounters:
    """mosquitto's $SYS PUBLISH counters (updated every second: ``sys_interval 1``)."""

    def __init__(self, port: int) -> None:
        self.values: dict[str, int] = {}
        self.updated = threading.Condition()
        self.client = _paho_client(f"bench-sys-{uuid.uuid4().hex[:8]}")
        self.client.on_connect = lambda c, *a: c.subscribe("$SYS/broker/publish/messages/+")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        with self.updated:
            self.values[message.topic.rsplit("/", 1)[1]] = int(message.payload)
            self.updated.notify_all()

    def fresh(self) -> dict[str, int]:
        """The counters after their next update."""
        with self.updated:
            self.updated.wait(3)
            self.updated.wait(3)  # received and sent arrive as two messages
            return dict(self.values)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# Ids that vary from message to message: job ids of the benchmark (B<run>-<slot>-<n>),
# equipment (bench-<slot>), client ids and hex tokens in reply topics.
_SHAPES = (
    (re.compile(r"B[0-9a-f]{6}-\d+-\d+"), "{job}"),
    (re.compile(r"bench-\d+"), "{equipment}"),
    (re.compile(r"[0-9a-f]{8,}"), "{id}"),
)


def topic_shape(topic: str) -> str:
    for pattern, name in _SHAPES:
        topic = pattern.sub(name, topic)
    return topic


class TopicCounts:
    """Every message the broker routes while ``counting``, by topic shape (``--topics``: a
    ``#`` subscriber, QoS 0, so the broker delivers each message once more)."""

    def __init__(self, port: int) -> None:
        self.counts: Counter[str] = Counter()
        self.counting = False
        self.lock = threading.Lock()
        self.client = _paho_client(f"bench-topics-{uuid.uuid4().hex[:8]}")
        self.client.on_connect = lambda client, *args: client.subscribe("#", qos=0)
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        if self.counting and not message.topic.startswith("$SYS"):
            with self.lock:
                self.counts[topic_shape(message.topic)] += 1

    def start(self) -> None:
        with self.lock:
            self.counts.clear()
            self.counting = True

    def stop(self) -> Counter[str]:
        with self.lock:
            self.counting = False
            return Counter(self.counts)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# -- the gateway and the MES -------------------------------------------------------------------


@dataclass(frozen=True)
class Gateways:
    """The gateway's processes (one per role) and the HTTP port (``/metrics``) of the one that
    answers the MES."""

    pids: list[int]
    http_port: int


MES_ROLES = ("all", *sorted(JOB_MANAGEMENT_ROLES))  # the roles that answer the MES


@contextmanager
def gateway_processes(
    mqtt: ServerProcess,
    redis: ServerProcess,
    log: Path,
    roles: list[str],
    block: str = "",
    settings: list[str] | None = None,
    profile: Path | None = None,
) -> Iterator[Gateways]:
    """``gateway run --role ROLE`` for each of ``roles``."""
    if not any(role in MES_ROLES for role in roles):
        raise SystemExit(f"--roles: one of {', '.join(MES_ROLES)} must answer the MES")
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                gateway_process(
                    mqtt,
                    redis,
                    log.with_name(f"gateway-{role}-{index}.log"),
                    role,
                    block,
                    settings,
                    instance=f"bench-{role}-{index}",
                    profile=profile,
                )
            )
            for index, role in enumerate(roles)
        ]
        ports = [port for _, port in started]
        http_port = next(port for role, port in zip(roles, ports, strict=True) if role in MES_ROLES)
        yield Gateways([pid for pid, _ in started], http_port)


@contextmanager
def gateway_process(
    mqtt: ServerProcess,
    redis: ServerProcess,
    log: Path,
    role: str = "all",
    block: str = "",
    settings: list[str] | None = None,
    instance: str = "bench",
    profile: Path | None = None,
) -> Iterator[tuple[int, int]]:
    """The pid and HTTP port (``/metrics``) of ``gateway run --role ROLE``."""
    http_port = free_port()
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
        "GATEWAY_MQTT_URL": f"mqtt://127.0.0.1:{mqtt.port}",
        "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        "GATEWAY_JOBS_TOPIC_PREFIX": JOBS_PREFIX,
        "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": "*",
        "GATEWAY_MQTT_EQUIPMENT_TOPIC_PREFIX": EQUIPMENT_PREFIX,
        "GATEWAY_MQTT_EQUIPMENT_HEARTBEAT_TIMEOUT_SECONDS": "0",
        "GATEWAY_GATEWAY_LOG_LEVEL": "WARNING",
        "GATEWAY_PLUGINS_BLOCK": block,
        # The step path, not the scheduling: every job may run at once (each on its own
        # equipment, see ``work_masters``).
        "GATEWAY_JOBS_MAX_RUNNING_JOB_ORDERS": "0",
        "GATEWAY_HTTP_PORT": str(http_port),
        "GATEWAY_GATEWAY_ROLE": role,
        "GATEWAY_GATEWAY_INSTANCE_ID": instance,
        **dict(setting.split("=", 1) for setting in settings or []),
    }
    # At log level WARNING it writes no "started" line: ``configure`` waits until it serves.
    script: Path | None = None
    arguments: tuple[str, ...] = ("run",)
    if profile is not None:  # cProfile writes it when the gateway stops (SIGTERM: a clean exit)
        script = Path(cProfile.__file__)
        output = profile.with_name(f"{profile.stem}-{instance}{profile.suffix}")
        arguments = ("-o", str(output), "-m", "gateway.cli", "run")
    gateway = GatewayProcess(script, environ, log, ready_line="", arguments=arguments)
    gateway.start()
    try:
        assert gateway.process is not None
        yield gateway.process.pid, http_port
    finally:
        gateway.stop(timeout=20)


@dataclass
class MesRun:
    store_latencies: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    ended: dict[str, anyio.Event] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _state_of(message_data: Any) -> tuple[str, str] | None:
    if not isinstance(message_data, dict):
        return None
    order = message_data.get("JobOrder") or {}
    states = message_data.get("JobState") or []
    if not states:
        return None
    return str(order.get("JobOrderID")), str(states[0].get("StateText", {}).get("Text"))


async def _request(
    client: MqttTestClient, type_: str, data: Any, timeout: float = 60, **attributes: Any
) -> CloudEvent:
    event = CloudEvent(type=type_, source="urn:bench:mes", subject=SCOPE, data=data, **attributes)
    return await client.request(f"{JOBS_PREFIX}/{SCOPE}/commands", event, timeout=timeout)


def work_master_id(slot: int) -> str:
    return f"WM-bench-{slot}"


def work_masters(steps: int, timeout: float, slots: int) -> list[dict[str, Any]]:
    """One Work Master per concurrent job, each on equipment of its own (``bench-<slot>``):
    jobs on the same equipment would wait for each other (the dispatcher allocates it)."""
    return [
        {
            "ID": work_master_id(slot),
            "Data": linear_recipe(
                steps,
                type_id="com.example.bench.step.v1",
                equipment=f"bench-{slot}",
                timeout_seconds=timeout,
            ),
            "DataSchema": DATASCHEMA,
        }
        for slot in range(slots)
    ]


async def configure(url: str, steps: int, timeout: float, slots: int) -> None:
    async with connect_test_client(url) as client:
        with anyio.fail_after(60):
            while True:  # until the gateway serves
                try:
                    document = work_masters(steps, timeout, slots)
                    reply = await _request(
                        client, CONFIG_WORKMASTER, document, timeout=10, method="PUT"
                    )
                    if reply.errorcode is None:
                        return
                    raise RuntimeError(f"work master refused: {reply.data}")
                except Exception as error:
                    if "refused" in str(error):
                        raise
                    await anyio.sleep(0.5)


async def mes_level(
    url: str, jobs: int, seconds: float, warmup: float, marks: dict[str, Any]
) -> MesRun:
    """Keep ``jobs`` jobs going; ``marks`` gets hooks called at the window's start and end."""
    run = MesRun()
    measuring = False
    stop = anyio.Event()
    prefix = uuid.uuid4().hex[:6]

    topic = f"{JOBS_PREFIX}/{SCOPE}/events"
    async with connect_test_client(url) as client, client.watch(topic) as events:

        async def watch() -> None:
            async for message in events:
                state = _state_of(from_mqtt(message).data)
                if state is None:
                    continue
                job, text = state
                if text in ("Ended", "Aborted") and job in run.ended:
                    run.outcomes[text] += 1
                    run.ended[job].set()

        async def loop(slot: int) -> None:
            nonlocal measuring
            sequence = 0
            while not stop.is_set():
                sequence += 1
                job = f"B{prefix}-{slot}-{sequence}"
                run.ended[job] = anyio.Event()
                order = {"JobOrderID": job, "WorkMasterID": [{"ID": work_master_id(slot)}]}
                started, in_window = time.perf_counter(), measuring
                reply = await _request(client, STORE_AND_START, {"JobOrder": order})
                # The calls sent in the window, however late their reply comes: those of the
                # warm-up (its first burst sends one per job at once) are the start-up, not
                # the steady state this figure describes.
                if in_window:
                    run.store_latencies.append(time.perf_counter() - started)
                if not isinstance(reply.data, dict) or reply.data.get("ReturnStatus") != 1:
                    run.errors.append(f"StoreAndStart {job}: {reply.data}")
                    await anyio.sleep(0.1)
                    continue
                with anyio.fail_after(120):
                    await run.ended[job].wait()
                del run.ended[job]
                await _request(client, CLEAR, {"JobOrderID": job})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            async with anyio.create_task_group() as loops:
                for slot in range(jobs):
                    loops.start_soon(loop, slot)
                await anyio.sleep(warmup)
                await anyio.to_thread.run_sync(marks["start"])
                measuring = True
                await anyio.sleep(seconds)
                measuring = False
                await anyio.to_thread.run_sync(marks["end"])
                stop.set()
            tasks.cancel_scope.cancel()
    return run


# -- one level, and the whole run ----------------------------------------------------------------


@dataclass
class Level:
    jobs: int
    raw_rate: float
    raw_p50: float
    raw_p99: float
    steps_per_second: float
    step_p50: float
    step_p99: float
    redis_per_step: float
    redis_top: list[tuple[str, float]]
    client_per_step: float
    client_top: list[tuple[str, float]]
    mqtt_per_step: float
    store_p50: float
    store_p99: float
    handled_p99: float  # the gateway's own view: an upper bound of a histogram bucket
    cpu_per_step: float
    gateway_cpu: float
    process_cpu: list[float]  # each gateway process's share of a core
    topics: list[tuple[str, float]]  # --topics: MQTT messages per step by topic shape
    redis_cpu_per_step: float  # redis-server's CPU over the window, per step
    broker_cpu_per_step: float  # mosquitto's (the MES's and the equipment's messages included)
    aborted: int
    ended: int
    errors: int
    ratio: float  # steps/s to raw MQTT requests/s, both of this run
    floor_rate: float  # steps/s of benchmarks/stack_floor.py: the least work per step
    floor_cpu_per_step: float
    floor_ratio: float  # floor_rate to raw MQTT requests/s: the most this stack could reach
    floor_step_p50: float  # the floor's step period (one command of a job to its next)
    floor_step_p99: float
    steps_per_job: int

    @property
    def cpu_to_floor(self) -> float:
        """The gateway's CPU per step over the floor's (issue 37's target: at most 2)."""
        return self.cpu_per_step / self.floor_cpu_per_step

    @property
    def rate_to_floor(self) -> float:
        """The gateway's steps/s over the floor's (issue 37's target: at least 0.5)."""
        return self.steps_per_second / self.floor_rate


def median_level(runs: list[Level]) -> Level:
    """Each figure's median over the runs of one level (the upper one of an even number): the
    ratio is the median of each run's own ratio, as every other figure."""
    figures: dict[str, Any] = {}
    for name, value in runs[0].__dict__.items():
        if isinstance(value, int | float):
            figures[name] = percentile([getattr(run, name) for run in runs], 0.5)
        else:
            figures[name] = value
    return Level(**figures)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure_level(
    jobs: int,
    args: argparse.Namespace,
    mqtt: ServerProcess,
    redis: Redis,
    redis_port: int,
    gateways: Gateways,
    answered: Any,
    pipe: multiprocessing.connection.Connection,
    broker: BrokerCounters,
    servers: dict[str, int],
    topics: TopicCounts | None = None,
) -> Level:
    if args.action_seconds > 0:  # the equipment's pace, not the stack's, sets the rate
        raw_rate, raw_times = float("nan"), list[float]()
        figures = ("steps_per_s", "cpu_ms_per_step", "step_p50_ms", "step_p99_ms")
        floor = {name: float("nan") for name in figures}
    else:
        raw_rate, raw_times = raw_round_trips(mqtt.port, jobs, args.seconds)
        floor = stack_floor(mqtt.port, redis_port, jobs, args.seconds)
    profiled, http_port = gateways.pids[0], gateways.http_port
    marks: dict[str, Any] = {}
    window: dict[str, Any] = {}

    def start() -> None:
        if args.py_spy:
            output = args.py_spy.with_name(f"{args.py_spy.stem}-{jobs}{args.py_spy.suffix}")
            window["spy"] = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(profiled),
                    "--duration",
                    str(int(args.seconds)),
                    "--format",
                    "raw",
                    "--output",
                    str(output),
                    "--rate",
                    "250",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        pipe.send("take")
        pipe.recv()  # forget steps before the window
        window["broker"] = broker.fresh()
        window["redis"] = redis_calls(redis)
        window["cpu"] = sum(map(cpu_seconds, gateways.pids))
        window["process_cpu"] = [cpu_seconds(pid) for pid in gateways.pids]
        window["server_cpu"] = {name: cpu_seconds(pid) for name, pid in servers.items()}
        window["mes_calls"] = mes_call_buckets(http_port)
        window["answered"] = answered.value
        if topics is not None:
            topics.start()
        window["t"] = time.perf_counter()

    def end() -> None:
        window["elapsed"] = time.perf_counter() - window["t"]
        window["topics"] = topics.stop() if topics is not None else Counter()
        window["answered"] = answered.value - window["answered"]
        window["cpu"] = sum(map(cpu_seconds, gateways.pids)) - window["cpu"]
        window["process_cpu"] = [
            (cpu_seconds(pid) - before) / window["elapsed"]
            for pid, before in zip(gateways.pids, window["process_cpu"], strict=True)
        ]
        window["server_cpu"] = {
            name: cpu_seconds(pid) - window["server_cpu"][name] for name, pid in servers.items()
        }
        window["handled_p99"] = bucket_percentile(
            window["mes_calls"], mes_call_buckets(http_port), 0.99
        )
        window["redis"] = redis_calls(redis) - window["redis"]
        after = broker.fresh()
        window["broker"] = after.get("received", 0) - window["broker"].get("received", 0)
        pipe.send("take")
        window["steps"] = pipe.recv()
        if "spy" in window:
            window["spy"].wait()
        window["clients"] = client_commands(
            redis_port, args.monitor_seconds, answered, args.monitor_log
        )

    marks["start"], marks["end"] = start, end
    url = f"mqtt://127.0.0.1:{mqtt.port}"
    run = anyio.run(mes_level, url, jobs, args.seconds, args.warmup, marks)
    steps = max(1, window["answered"])
    redis_total = sum(window["redis"].values())
    step_times = window["steps"]
    clients, monitored = window["clients"]
    monitored = max(1, monitored)
    return Level(
        jobs=jobs,
        raw_rate=raw_rate,
        raw_p50=percentile(raw_times, 0.5),
        raw_p99=percentile(raw_times, 0.99),
        steps_per_second=window["answered"] / window["elapsed"],
        step_p50=percentile(step_times, 0.5),
        step_p99=percentile(step_times, 0.99),
        redis_per_step=redis_total / steps,
        redis_top=[(name, calls / steps) for name, calls in window["redis"].most_common(8)],
        client_per_step=sum(clients.values()) / monitored,
        client_top=[(name, calls / monitored) for name, calls in clients.most_common(8)],
        mqtt_per_step=window["broker"] / steps,
        store_p50=percentile(run.store_latencies, 0.5),
        store_p99=percentile(run.store_latencies, 0.99),
        handled_p99=window["handled_p99"],
        cpu_per_step=window["cpu"] / steps,
        gateway_cpu=window["cpu"] / window["elapsed"],
        process_cpu=window["process_cpu"],
        topics=[(shape, count / steps) for shape, count in window["topics"].most_common()],
        redis_cpu_per_step=window["server_cpu"]["redis"] / steps,
        broker_cpu_per_step=window["server_cpu"]["broker"] / steps,
        aborted=run.outcomes["Aborted"],
        ended=run.outcomes["Ended"],
        errors=len(run.errors),
        ratio=window["answered"] / window["elapsed"] / raw_rate,
        floor_rate=floor["steps_per_s"],
        floor_cpu_per_step=floor["cpu_ms_per_step"] / 1000,
        floor_ratio=floor["steps_per_s"] / raw_rate,
        floor_step_p50=floor["step_p50_ms"] / 1000,
        floor_step_p99=floor["step_p99_ms"] / 1000,
        steps_per_job=args.steps,
    )


def report(level: Level) -> None:
    ms = 1000.0
    print(
        f"\n== {level.jobs} concurrent jobs ==\n"
        f"  raw MQTT QoS 1 request/reply : {level.raw_rate:8.0f} /s   round trip p50 "
        f"{level.raw_p50 * ms:.2f} ms, p99 {level.raw_p99 * ms:.2f} ms\n"
        f"  gateway steps                : {level.steps_per_second:8.0f} /s   ratio "
        f"{level.ratio:.2f}\n"
        f"  stack floor                  : {level.floor_rate:8.0f} /s   ratio "
        f"{level.floor_ratio:.2f}, {level.floor_cpu_per_step * ms:.2f} ms CPU per step "
        "(receive, 1 Redis script, publish: benchmarks/stack_floor.py)\n"
        f"  step time                    : p50 {level.step_p50 * ms:.2f} ms, p99 "
        f"{level.step_p99 * ms:.2f} ms (adds {(level.step_p50 - level.raw_p50) * ms:.2f} / "
        f"{(level.step_p99 - level.raw_p99) * ms:.2f} ms to a raw round trip; the floor's "
        f"p50 {level.floor_step_p50 * ms:.2f} ms, p99 {level.floor_step_p99 * ms:.2f} ms)\n"
        f"  Redis commands per step      : {level.client_per_step:.1f} sent by clients ("
        + ", ".join(f"{name} {calls:.2f}" for name, calls in level.client_top)
        + f"); {level.redis_per_step:.1f} run, scripts' calls included ("
        + ", ".join(f"{name} {calls:.2f}" for name, calls in level.redis_top)
        + ")\n"
        f"  MQTT PUBLISH per step        : {level.mqtt_per_step:.1f} (into the broker)\n"
        f"  StoreAndStart reply          : p50 {level.store_p50 * ms:.1f} ms, p99 "
        f"{level.store_p99 * ms:.1f} ms (the gateway's own histogram of MES calls handled: "
        f"p99 <= {level.handled_p99 * ms:g} ms)\n"
        f"  gateway CPU                  : {level.cpu_per_step * ms:.2f} ms per step "
        f"({level.gateway_cpu * 100:.0f}% of a core"
        + (
            ": " + ", ".join(f"{share * 100:.0f}%" for share in level.process_cpu)
            if len(level.process_cpu) > 1
            else ""
        )
        + f"); Redis {level.redis_cpu_per_step * ms:.2f} ms, broker "
        f"{level.broker_cpu_per_step * ms:.2f} ms per step\n"
        f"  against the floor            : CPU per step x{level.cpu_to_floor:.2f} (target <= 2), "
        f"steps/s x{level.rate_to_floor:.2f} (target >= 0.5), step p50 "
        f"{(level.step_p50 - level.floor_step_p50) * ms:+.2f} ms, p99 "
        f"{(level.step_p99 - level.floor_step_p99) * ms:+.2f} ms\n"
        f"  jobs in the window           : {level.ended} ended, {level.aborted} aborted, "
        f"{level.errors} refused"
    )
    for shape, per_step in level.topics:
        print(
            f"    {per_step:6.3f} per step, {per_step * level.steps_per_job:6.2f} per job: {shape}"
        )


def table(levels: list[Level]) -> None:
    print(
        "\n| jobs | raw MQTT/s | steps/s | ratio | floor ratio | step p50/p99 ms | "
        "adds p50/p99 ms | "
        "Redis cmd/step (run) | MQTT msg/step | StoreAndStart p99 ms (handled in gateway) | "
        "CPU ms/step | CPU/floor's | steps/s/floor's | Redis, broker CPU ms/step | aborted |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for level in levels:
        print(
            f"| {level.jobs} | {level.raw_rate:.0f} | {level.steps_per_second:.0f} | "
            f"{level.ratio:.2f} | {level.floor_ratio:.2f} | "
            f"{level.step_p50 * 1000:.2f} / {level.step_p99 * 1000:.2f} | "
            f"{(level.step_p50 - level.raw_p50) * 1000:.2f} / "
            f"{(level.step_p99 - level.raw_p99) * 1000:.2f} | "
            f"{level.client_per_step:.1f} ({level.redis_per_step:.0f}) | "
            f"{level.mqtt_per_step:.1f} | "
            f"{level.store_p99 * 1000:.1f} (<= {level.handled_p99 * 1000:g}) | "
            f"{level.cpu_per_step * 1000:.2f} | {level.cpu_to_floor:.2f} | "
            f"{level.rate_to_floor:.2f} | {level.redis_cpu_per_step * 1000:.2f}, "
            f"{level.broker_cpu_per_step * 1000:.2f} | {level.aborted} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,10,40,200", help="concurrent jobs, comma separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per level")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each window")
    parser.add_argument("--steps", type=int, default=10, help="push_command steps per recipe")
    parser.add_argument("--timeout", type=float, default=3.0, help="action timeout, seconds")
    parser.add_argument(
        "--action-seconds",
        type=float,
        default=0.0,
        help="the equipment answers this long after each command (0: at once); the raw "
        "baseline and the floor are then left out",
    )
    parser.add_argument(
        "--gateways", type=int, default=1, help="run the --roles this many times over"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the levels this many times over (then a table of medians follows)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--monitor-seconds", type=float, default=2.0, help="MONITOR after each window"
    )
    parser.add_argument(
        "--monitor-log", type=Path, help="append every command MONITOR saw to this file"
    )
    parser.add_argument(
        "--setting",
        action="append",
        help="GATEWAY_<SECTION>_<KEY>=value for the gateway (repeatable)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        help="profile the gateway (the first of --roles) in each window (py-spy raw output)",
    )
    parser.add_argument(
        "--topics",
        action="store_true",
        help="also count every MQTT message by topic (a '#' subscriber: the broker delivers "
        "each message once more, so the other figures are not this level's best)",
    )
    parser.add_argument(
        "--cprofile",
        type=Path,
        help="run each gateway process under cProfile, its whole life (pstats output, one file "
        "per process, named after it)",
    )
    parser.add_argument(
        "--roles",
        default="all",
        help="one gateway process per role, comma separated (e.g. jobs,engine,publisher)",
    )
    parser.add_argument(
        "--block", default="", help="plugins the gateway leaves out (GATEWAY_PLUGINS_BLOCK)"
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]

    work = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    redis_process = redis_server().start()
    mqtt = mosquitto(extra_config="sys_interval 1").start()
    context = multiprocessing.get_context("spawn")
    answered = context.Value("q", 0, lock=False)
    ready = context.Event()
    parent_pipe, child_pipe = context.Pipe()
    equipment = context.Process(
        target=responder,
        args=(mqtt.port, answered, ready, child_pipe, args.action_seconds),
        daemon=True,
    )
    equipment.start()
    broker = BrokerCounters(mqtt.port)
    topics = TopicCounts(mqtt.port) if args.topics else None
    redis = Redis(port=redis_process.port)
    results: list[Level] = []
    try:
        if not ready.wait(20):
            raise RuntimeError("the equipment process did not subscribe")
        roles = args.roles.split(",") * args.gateways
        log = work / "gateway.log"
        with gateway_processes(
            mqtt, redis_process, log, roles, args.block, args.setting, args.cprofile
        ) as gateways:
            url = f"mqtt://127.0.0.1:{mqtt.port}"
            anyio.run(configure, url, args.steps, args.timeout, max(levels))
            processes = zip(roles, gateways.pids, strict=True)
            print(
                f"gateway {', '.join(f'{role} pid {pid}' for role, pid in processes)} "
                f"(logs {work}); {args.steps} push_command steps per job, "
                f"{args.timeout:g} s action timeouts, {args.seconds:g} s per level"
            )
            assert redis_process.process is not None
            assert mqtt.process is not None
            servers = {"redis": redis_process.process.pid, "broker": mqtt.process.pid}
            rounds = [jobs for _ in range(args.repeat) for jobs in levels]  # 1,10,..,1,10,..
            for jobs in rounds:
                level = measure_level(
                    jobs,
                    args,
                    mqtt,
                    redis,
                    redis_process.port,
                    gateways,
                    answered,
                    parent_pipe,
                    broker,
                    servers,
                    topics,
                )
                report(level)
                results.append(level)
        table(results)
        if args.repeat > 1:
            print(f"\nMedians of {args.repeat} runs:")
            table([median_level([r for r in results if r.jobs == jobs]) for jobs in levels])
        if args.json:
            args.json.write_text(json.dumps([level.__dict__ for level in results], indent=1))
    finally:
        parent_pipe.send("stop")
        equipment.join(5)
        broker.close()
        if topics is not None:
            topics.close()
        mqtt.close()
        redis_process.close()


if __name__ == "__main__":
    main()
