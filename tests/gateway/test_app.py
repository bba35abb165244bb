"""The gateway runtime: start order, lifecycle hooks, failures, graceful shutdown, signals.

The bindings and services here are real in-process implementations of the ``Binding`` and
``Service`` contracts (no broker or store involved), contributed by a test plugin.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.errors import GatewayError, PluginError
from gateway.hookspecs import hookimpl
from gateway.testing import WITHOUT_DEFAULT_PLUGINS
from gateway.transport import Processor, Subscription

COMMANDS = "gw/station-1/commands"
START = "com.example.start.v1"


def environ(**values: str) -> dict[str, str]:
    """An environment without the default redis and mqtt plugins."""
    base = {
        "GATEWAY_PLUGINS_BLOCK": WITHOUT_DEFAULT_PLUGINS,
        "GATEWAY_GATEWAY_INSTANCE_ID": "gw-test",
    }
    return base | values


# -- an in-process binding and services ------------------------------------------------------


class InProcessBinding:
    """Delivers events handed to ``deliver`` to the dispatcher; replies land in ``published``."""

    def __init__(self, journal: list[str], name: str = "inproc") -> None:
        self.name = name
        self.journal = journal
        self.published: list[tuple[str, CloudEvent]] = []
        self.published_count: dict[int, anyio.Event] = {}
        self._send: MemoryObjectSendStream[tuple[str, CloudEvent]] | None = None

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        send, receive = anyio.create_memory_object_stream[tuple[str, CloudEvent]](100)
        self._send = send
        self.journal.append(f"binding {self.name} up")
        async with anyio.create_task_group() as handlers:
            async with anyio.create_task_group() as intake:
                intake.start_soon(self._take, gateway, receive, handlers)
                task_status.started()
                await gateway.stopping.wait()
                intake.cancel_scope.cancel()  # no new messages; in-flight ones finish
            await gateway.dispatcher.wait_idle()
        self.journal.append(f"binding {self.name} down")

    async def _take(
        self,
        gateway: Gateway,
        receive: MemoryObjectReceiveStream[tuple[str, CloudEvent]],
        handlers: anyio.abc.TaskGroup,
    ) -> None:
        async for topic, event in receive:
            handlers.start_soon(self._handle, gateway, topic, event)

    async def _handle(self, gateway: Gateway, topic: str, event: CloudEvent) -> None:
        for reply in await gateway.dispatcher.dispatch(event, binding=self.name, topic=topic):
            await self.publish(f"{topic}/replies", reply)

    async def deliver(self, topic: str, event: CloudEvent) -> None:
        assert self._send is not None, "binding not running"
        await self._send.send((topic, event))

    async def publish(
        self, topic: str, event: CloudEvent, *, retain: bool = False, qos: int = 1
    ) -> None:
        self.published.append((topic, event))
        if len(self.published) in self.published_count:
            self.published_count[len(self.published)].set()

    async def wait_published(self, count: int) -> None:
        if len(self.published) < count:
            await self.published_count.setdefault(count, anyio.Event()).wait()

    async def request(self, topic: str, event: CloudEvent, *, timeout: float) -> CloudEvent:
        raise NotImplementedError("in-process requests are not needed here")


@dataclass
class JournalService:
    """A service that records its life; ``wind_down`` is how long it takes to stop."""

    name: str
    journal: list[str]
    roles: frozenset[str] = frozenset({"gateway"})
    wind_down: float = 0.0
    fail_to_start: bool = False
    fail_after_start: bool = False
    end_early: bool = False

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self.journal.append(f"service {self.name} starting")
        await anyio.sleep(0.01)
        if self.fail_to_start:
            raise RuntimeError("port 4840 in use")
        task_status.started()
        self.journal.append(f"service {self.name} up")
        if self.fail_after_start:
            raise RuntimeError("lost the connection")
        if self.end_early:
            return
        await gateway.stopping.wait()
        try:
            await anyio.sleep(self.wind_down)
        except anyio.get_cancelled_exc_class():
            self.journal.append(f"service {self.name} cancelled")
            raise
        self.journal.append(f"service {self.name} down")


@dataclass
class RuntimePlugin:
    """A test plugin contributing bindings, processors and services, and watching the hooks."""

    journal: list[str] = field(default_factory=list)
    bindings: Sequence[str] = ()  # names of in-process bindings to contribute
    services: Sequence[JournalService] = ()
    processors: Sequence[Processor] = ()
    made: dict[str, InProcessBinding] = field(default_factory=dict)

    @hookimpl
    def gateway_register_bindings(self, register: Callable[[Any], None], settings: Any) -> None:
        for name in self.bindings:
            self.made[name] = InProcessBinding(self.journal, name)
            register(self.made[name])

    @hookimpl
    def gateway_register_processors(self, register: Callable[[Any], None], settings: Any) -> None:
        for processor in self.processors:
            register(processor)

    @hookimpl
    def gateway_register_services(self, register: Callable[[Any], None], settings: Any) -> None:
        for service in self.services:
            register(service)

    @hookimpl
    def gateway_startup(self, gateway: Gateway) -> None:
        self.journal.append("hook startup")

    @hookimpl
    def gateway_shutdown(self, gateway: Gateway, reason: str) -> None:
        self.journal.append(f"hook shutdown: {reason}")


def build(plugin: RuntimePlugin, **values: str) -> Gateway:
    return Gateway.from_environment(environ=environ(**values), extra_plugins={"runtime": plugin})


async def echo(event: CloudEvent) -> Sequence[CloudEvent]:
    return [event.reply(source="urn:test", data={"echo": event.data})]


class HeldHandler:
    """A handler that holds its event until released (in-flight work)."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.finished = False

    async def __call__(self, event: CloudEvent) -> Sequence[CloudEvent]:
        self.entered.set()
        await self.release.wait()
        self.finished = True
        return [event.reply(source="urn:test", data="finished")]


def command(event_type: str = START, **changes: Any) -> CloudEvent:
    return CloudEvent(type=event_type, source="urn:mes", subject="station-1", **changes).validate()


# -- lifecycle -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_bindings_then_services_start_in_order_and_stop_on_request() -> None:
    journal: list[str] = []
    plugin = RuntimePlugin(
        journal,
        bindings=["inproc"],
        services=[JournalService("first", journal), JournalService("second", journal)],
    )
    gateway = build(plugin)
    assert [service.name for service in gateway.services] == ["first", "second"]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            assert plugin.journal == [
                "binding inproc up",
                "service first starting",
                "service first up",
                "service second starting",
                "service second up",
                "hook startup",
            ]
            gateway.request_stop("test is done")
    assert plugin.journal[6] == "hook shutdown: test is done"
    assert sorted(plugin.journal[7:]) == [
        "binding inproc down",
        "service first down",
        "service second down",
    ]
    assert gateway.stop_reason == "test is done"
    assert gateway.failed is False


@pytest.mark.anyio
async def test_a_gateway_without_bindings_or_services_runs_until_stopped() -> None:
    plugin = RuntimePlugin()
    gateway = build(plugin)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            await anyio.sleep(0.05)
            assert not gateway.stopping.is_set()
            gateway.request_stop("enough")
    assert plugin.journal == ["hook startup", "hook shutdown: enough"]


@pytest.mark.anyio
async def test_only_the_services_of_the_selected_role_run() -> None:
    journal: list[str] = []
    plugin = RuntimePlugin(
        journal,
        services=[
            JournalService("engine", journal, roles=frozenset({"gateway"})),
            JournalService("publisher", journal, roles=frozenset({"publisher"})),
        ],
    )
    gateway = build(plugin, GATEWAY_GATEWAY_ROLE="publisher")
    assert [service.name for service in gateway.services_for_role()] == ["publisher"]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            gateway.request_stop("done")
    assert not any("engine" in line for line in plugin.journal)
    assert "service publisher down" in plugin.journal


@pytest.mark.anyio
async def test_a_service_that_fails_to_start_fails_the_run_with_its_name() -> None:
    plugin = RuntimePlugin(bindings=["inproc"])
    plugin.services = [
        JournalService("healthy", plugin.journal),
        JournalService("opcua", plugin.journal, fail_to_start=True),
        JournalService("never", plugin.journal),
    ]
    gateway = build(plugin)
    with anyio.fail_after(10), pytest.raises(GatewayError) as caught:
        await gateway.run()
    assert "opcua" in str(caught.value)
    assert "port 4840 in use" in str(caught.value)
    assert gateway.failed is True
    assert "hook startup" not in plugin.journal
    assert not any("never" in line for line in plugin.journal)
    # What had started is stopped again.
    assert "binding inproc down" in plugin.journal
    assert "service healthy down" in plugin.journal


@pytest.mark.anyio
async def test_a_service_failing_later_stops_the_gateway_with_its_name() -> None:
    plugin = RuntimePlugin(bindings=["inproc"])
    plugin.services = [JournalService("scanner", plugin.journal, fail_after_start=True)]
    gateway = build(plugin)
    with anyio.fail_after(10), pytest.raises(GatewayError) as caught:
        await gateway.run()
    assert "service scanner failed" in str(caught.value)
    assert "lost the connection" in str(caught.value)
    assert "binding inproc down" in plugin.journal


@pytest.mark.anyio
async def test_a_service_ending_on_its_own_stops_the_gateway() -> None:
    plugin = RuntimePlugin()
    plugin.services = [JournalService("quitter", plugin.journal, end_early=True)]
    gateway = build(plugin)
    with anyio.fail_after(10), pytest.raises(GatewayError) as caught:
        await gateway.run()
    assert "service quitter ended unexpectedly" in str(caught.value)


@pytest.mark.anyio
async def test_run_can_be_repeated_after_a_stop() -> None:
    plugin = RuntimePlugin(bindings=["inproc"])
    gateway = build(plugin)
    for attempt in range(2):
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                await tasks.start(gateway.run)
                gateway.request_stop(f"round {attempt}")
        assert gateway.stop_reason == f"round {attempt}"
    assert plugin.journal.count("binding inproc up") == 2


# -- graceful shutdown -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_shutdown_waits_for_services_within_the_grace_period() -> None:
    plugin = RuntimePlugin()
    plugin.services = [JournalService("slow", plugin.journal, wind_down=0.3)]
    gateway = build(plugin, GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS="5")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            began = time.monotonic()
            gateway.request_stop("deploy")
    assert time.monotonic() - began >= 0.3
    assert "service slow down" in plugin.journal
    assert "service slow cancelled" not in plugin.journal


@pytest.mark.anyio
async def test_shutdown_cancels_what_outlives_the_grace_period() -> None:
    plugin = RuntimePlugin()
    plugin.services = [JournalService("stuck", plugin.journal, wind_down=60)]
    gateway = build(plugin, GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS="0.2")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            began = time.monotonic()
            gateway.request_stop("deploy")
    assert 0.2 <= time.monotonic() - began < 5
    assert "service stuck cancelled" in plugin.journal
    assert gateway.failed is False


@pytest.mark.anyio
async def test_in_flight_messages_finish_and_reply_during_the_grace_period() -> None:
    held = HeldHandler()
    plugin = RuntimePlugin(
        bindings=["inproc"],
        processors=[Processor("held", [Subscription("gw/+/commands")], held, binding="inproc")],
    )
    gateway = build(plugin, GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS="5")
    request = command(data="work")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            await plugin.made["inproc"].deliver(COMMANDS, request)
            await held.entered.wait()
            gateway.request_stop("deploy")
            await anyio.sleep(0.1)
            assert gateway.dispatcher.in_flight == 1
            assert "binding inproc down" not in plugin.journal
            held.release.set()
    assert held.finished
    [(topic, reply)] = plugin.made["inproc"].published
    assert topic == f"{COMMANDS}/replies"
    assert reply.data == "finished"
    assert reply.correlationid == request.id


@pytest.mark.anyio
async def test_in_flight_messages_are_cancelled_after_the_grace_period() -> None:
    held = HeldHandler()
    plugin = RuntimePlugin(
        bindings=["inproc"],
        processors=[Processor("held", [Subscription("gw/+/commands")], held, binding="inproc")],
    )
    gateway = build(plugin, GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS="0.2")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            await plugin.made["inproc"].deliver(COMMANDS, command())
            await held.entered.wait()
            gateway.request_stop("deploy")
    assert not held.finished
    assert plugin.made["inproc"].published == []
    assert gateway.dispatcher.in_flight == 0


@pytest.mark.anyio
async def test_messages_are_served_while_running() -> None:
    plugin = RuntimePlugin(
        bindings=["inproc"],
        processors=[
            Processor(
                "echo",
                [Subscription("gw/+/commands")],
                echo,
                event_types=frozenset({START}),
                binding="inproc",
            )
        ],
    )
    gateway = build(plugin)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            await tasks.start(gateway.run)
            await plugin.made["inproc"].deliver(COMMANDS, command(data=1))
            await plugin.made["inproc"].deliver(COMMANDS, command("com.example.unknown.v1"))
            await plugin.made["inproc"].wait_published(2)
            gateway.request_stop("done")
    replies = sorted((reply for _, reply in plugin.made["inproc"].published), key=lambda r: r.type)
    assert replies[0].data == {"echo": 1}
    assert replies[1].errorcode == "unknown-type"


# -- registration errors ---------------------------------------------------------------------


def test_two_bindings_with_one_name_are_rejected() -> None:
    plugin = RuntimePlugin(bindings=["inproc", "inproc"])
    with pytest.raises(PluginError) as caught:
        build(plugin)
    assert "'inproc'" in str(caught.value)


def test_two_processors_with_one_name_are_rejected() -> None:
    subscriptions = [Subscription(COMMANDS)]
    plugin = RuntimePlugin(
        bindings=["inproc"],
        processors=[
            Processor("twin", subscriptions, echo, binding="inproc"),
            Processor("twin", subscriptions, echo, binding="inproc"),
        ],
    )
    with pytest.raises(PluginError) as caught:
        build(plugin)
    assert "'twin'" in str(caught.value)


def test_two_services_with_one_name_are_rejected() -> None:
    plugin = RuntimePlugin(services=[JournalService("twin", []), JournalService("twin", [])])
    with pytest.raises(PluginError) as caught:
        build(plugin)
    assert "'twin'" in str(caught.value)


def test_a_processor_needs_a_registered_binding() -> None:
    plugin = RuntimePlugin(
        bindings=["inproc"],
        processors=[Processor("orphan", [Subscription(COMMANDS)], echo, binding="opcua")],
    )
    with pytest.raises(PluginError) as caught:
        build(plugin)
    message = str(caught.value)
    assert "'orphan'" in message
    assert "'opcua'" in message
    assert "inproc" in message


def test_binding_lookup() -> None:
    gateway = build(RuntimePlugin(bindings=["inproc"]))
    assert gateway.binding("inproc").name == "inproc"
    with pytest.raises(PluginError):
        gateway.binding("mqtt")


def test_the_gateway_takes_its_identity_from_settings() -> None:
    gateway = build(RuntimePlugin(), GATEWAY_GATEWAY_SOURCE="urn:cell-7")
    assert gateway.instance_id == "gw-test"
    assert gateway.source == "urn:cell-7"
    assert gateway.dispatcher.source == "urn:cell-7"
    assert build(RuntimePlugin()).source == "urn:station-gateway:gw-test"


# -- the real process: signals ---------------------------------------------------------------


class LogReader:
    """Collects a child's stderr lines on a thread so the test can wait for one."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{text!r} not logged within {timeout} s: {self.text}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"process ended before logging {text!r}: {self.text}")
            self.lines.append(line)

    def finish(self) -> str:
        self._thread.join(timeout=10)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        return self.text

    @property
    def text(self) -> str:
        return "".join(self.lines)


@pytest.fixture
def child_environ(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GATEWAY_PLUGINS_BLOCK": WITHOUT_DEFAULT_PLUGINS,
        "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path / "data"),
        "GATEWAY_GATEWAY_INSTANCE_ID": "gw-signal-test",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def spawn(child_environ: dict[str, str]) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    children: list[subprocess.Popen[str]] = []

    def spawn(*args: str, **env: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, *args],
            env={**child_environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        return child

    yield spawn
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_gateway_run_stops_cleanly_on_a_signal(
    spawn: Callable[..., subprocess.Popen[str]], signal_number: signal.Signals, tmp_path: Path
) -> None:
    child = spawn("-m", "gateway.cli", "run")
    assert child.stderr is not None
    log = LogReader(child.stderr)
    log.wait_for("gateway gw-signal-test started")
    assert child.poll() is None, "with no bindings the gateway still runs until signalled"
    time.sleep(0.2)
    assert child.poll() is None
    child.send_signal(signal_number)
    assert child.wait(timeout=30) == 0
    text = log.finish()
    assert "settings [gateway]" in text
    settings_lines = [line for line in text.splitlines() if " settings [" in line]
    assert max(map(len, settings_lines)) < 300  # one short line per section
    assert f"data_dir='{tmp_path / 'data'}'" in text
    assert "instance_id='gw-signal-test'" in text
    assert "bindings none, services none" in text
    assert f"stopping: received {signal_number.name}" in text
    assert "gateway gw-signal-test stopped" in text
    assert "Traceback" not in text


RUNNER = textwrap.dedent(
    """
    import os, signal, sys
    import anyio
    from gateway.app import Gateway
    from gateway.hookspecs import hookimpl
    from gateway.logs import configure_logging

    class SignalsAtStartup:
        @hookimpl
        def gateway_startup(self, gateway):
            # A supervisor that asks the gateway to stop as soon as it reports it started.
            os.kill(os.getpid(), signal.SIGTERM)

    gateway = Gateway.from_environment(extra_plugins={"eager": SignalsAtStartup()})
    configure_logging(gateway.settings)
    anyio.run(lambda: gateway.run(handle_signals=True))
    print("run returned", flush=True)
    """
)


def test_a_signal_right_after_start_up_still_stops_gracefully(
    spawn: Callable[..., subprocess.Popen[str]],
) -> None:
    child = spawn("-c", RUNNER)
    stdout, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr
    assert "stopping: received SIGTERM" in stderr
    assert "run returned" in stdout


@pytest.mark.parametrize(
    ("role", "expected"),
    [("all", {"commands", "mirror"}), ("gateway", {"commands"}), ("publisher", {"mirror"})],
)
def test_processors_serve_only_in_their_roles(role: str, expected: set[str]) -> None:
    plugin = RuntimePlugin(
        bindings=["inproc"],
        processors=[
            Processor("commands", [Subscription(COMMANDS)], echo, binding="inproc"),
            Processor(
                "mirror",
                [Subscription("mirror/#")],
                echo,
                binding="inproc",
                roles=frozenset({"publisher"}),
            ),
        ],
    )
    gateway = build(plugin, GATEWAY_GATEWAY_ROLE=role)
    assert {p.name for p in gateway.dispatcher.processors_for("inproc")} == expected
