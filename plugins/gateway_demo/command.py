"""The ``gateway demo`` command: settings for a self-contained station, then the run."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
import uuid

import anyio
from rich.console import Console

from gateway.app import Gateway, load_gateway_settings
from gateway.cli import Command
from gateway.errors import ConnectionFailed
from gateway.logs import configure_logging
from gateway.mqttclient import BrokerUnreachable
from gateway.plugins import GatewayPluginManager
from gateway.testing import running
from gateway.testing.services import free_port
from gateway_demo.station import TOPIC_PREFIX, DemoMes, Progress, partial_summary, run_demo
from gateway_mqtt.clients import connect_client

SIMULATED = ("positioner", "tightener", "camera")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=8, help="how many jobs the MES starts")
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between starts")
    parser.add_argument(
        "--mqtt", default=None, help="use this broker (mqtt://host:port) instead of in-process"
    )
    parser.add_argument("--redis", default=None, help="use this Redis instead of an embedded one")
    parser.add_argument("--seed", type=int, default=None, help="simulator seed (repeatable runs)")
    parser.add_argument(
        "--timeout", type=float, default=120, help="give up after this many seconds (all of it)"
    )
    parser.add_argument("--log-level", default="WARNING", help="gateway log level")
    parser.add_argument(
        "--ui",
        action="store_true",
        help="serve the web UI (its URL is printed) during the run and after it, until Ctrl-C",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="the UI's port with --ui; 0: a free one"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON document (progress goes to stderr)",
    )


def demo_environment(args: argparse.Namespace) -> dict[str, str]:
    """The settings of the demo station, over whatever the environment already sets.

    With no broker given, the MES and the gateway meet on an in-process broker and the
    simulated devices speak MessagePack-RPC over loopback; with ``--mqtt``, everything speaks
    MQTT through that broker. With no Redis given, an embedded Redis keeps its data in a fresh
    temporary directory.
    """
    environ = dict(os.environ)
    environ.update(
        {
            "GATEWAY_GATEWAY_INSTANCE_ID": "demo",
            "GATEWAY_GATEWAY_LOG_LEVEL": args.log_level.upper(),
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_JOBS_TOPIC_PREFIX": TOPIC_PREFIX,
            "GATEWAY_SIMULATOR_ENABLED": "true",
            "GATEWAY_MQTT_URL": args.mqtt or "memory://demo",
            "GATEWAY_REDIS_URL": args.redis or "",
        }
    )
    if args.seed is not None:
        environ["GATEWAY_SIMULATOR_SEED"] = str(args.seed)
    if args.ui:
        environ["GATEWAY_HTTP_PORT"] = str(args.port or free_port())
    if args.redis:  # a shared Redis: keep this run's keys apart
        environ["GATEWAY_REDIS_KEY_PREFIX"] = f"demo-{uuid.uuid4().hex[:8]}"
    else:
        environ["GATEWAY_GATEWAY_DATA_DIR"] = tempfile.mkdtemp(prefix="gateway-demo-")
    if not args.mqtt:
        environ["GATEWAY_MSGPACK_RPC_HOST"] = "127.0.0.1"
        environ["GATEWAY_MSGPACK_RPC_PORT"] = str(free_port())
        environ["GATEWAY_SIMULATOR_RPC_DEVICES"] = ",".join(SIMULATED)
    return environ


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    environ = demo_environment(args)
    settings = load_gateway_settings(plugins, None, environ)
    configure_logging(settings)
    progress = Progress()
    plugins.register(progress, name="demo-progress")
    gateway = Gateway(settings, plugins)
    # Wrapped to the width on a terminal; in a pipe or a log, one line per line.
    # With --json, stdout carries only the JSON document: the rest goes to stderr.
    stream = sys.stderr if args.json else sys.stdout
    out = Console(file=stream, highlight=False, soft_wrap=not stream.isatty())
    out.print(
        f"Station gateway demo: {args.jobs} rear-axle jobs on a simulated station "
        f"({'broker ' + args.mqtt if args.mqtt else 'in-process broker'}, "
        f"{'Redis ' + args.redis if args.redis else 'embedded Redis'})",
        markup=False,
    )
    if args.ui:
        out.print(f"The web UI: {ui_url(environ)}", markup=False, soft_wrap=True)
    try:
        return anyio.run(_demo, args, environ, gateway, progress, out)
    except BrokerUnreachable as error:
        print(f"gateway demo: {error}; start one, or leave out --mqtt", file=sys.stderr)
        return 1
    except Exception as error:  # one line for a server that is not there, not a traceback
        failed = connection_failure(error)
        if failed is None:
            raise
        flag = {"redis.url": "--redis", "mqtt.url": "--mqtt"}.get(failed.setting)
        where = f"check {flag}" if flag else f"check {failed.setting}"
        print(f"gateway demo: {failed.message.rstrip('.')}; {where}", file=sys.stderr)
        return 1


def connection_failure(error: BaseException) -> ConnectionFailed | None:
    """The ``ConnectionFailed`` that ended the run, also from inside exception groups."""
    if isinstance(error, ConnectionFailed):
        return error
    for inner in getattr(error, "exceptions", ()):
        if found := connection_failure(inner):
            return found
    return None


async def _demo(
    args: argparse.Namespace,
    environ: dict[str, str],
    gateway: Gateway,
    progress: Progress,
    out: Console,
) -> int:
    """The demo within ``--timeout``; Ctrl-C (or SIGTERM) ends it early with what happened.

    The MES connects first, so a broker that is not there is reported at once instead of the
    gateway retrying it. Either way the gateway stops gracefully before the summary.
    """
    started = time.monotonic()
    demo = anyio.CancelScope(deadline=anyio.current_time() + args.timeout)
    ended_by = ["timed out"]
    interrupted = anyio.Event()

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                ended_by[0] = "interrupted"
                interrupted.set()
                demo.cancel()

    status: int | None = None
    connect_timeout = max(1.0, min(args.timeout, 10.0))
    url = environ["GATEWAY_MQTT_URL"]
    async with (
        connect_client(url, "demo-mes", connect_timeout=connect_timeout) as client,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(on_signal)
        async with running(gateway):
            mes = DemoMes(client, progress, args.jobs, args.interval, out, keep_jobs=args.ui)
            with demo:  # cancelled by the deadline or a signal; the gateway then stops
                status = await run_demo(gateway, mes, started, as_json=args.json)
            if args.ui and status is not None and not interrupted.is_set():
                out.print(
                    f"The web UI stays at {ui_url(environ)} (Ctrl-C ends).",
                    markup=False,
                    soft_wrap=True,
                )
                await interrupted.wait()
            # The simulated devices leave and replies in flight are lost as the demo ends:
            # expected, not news. Errors still show.
            logging.getLogger().setLevel(logging.ERROR)
        tasks.cancel_scope.cancel()
    if status is None:
        elapsed = time.monotonic() - started
        out.print(partial_summary(progress, args.jobs, elapsed, ended_by[0]))
        if args.json:
            print(json.dumps(partial_document(progress, args.jobs, elapsed, ended_by[0])))
        return 130 if ended_by[0] == "interrupted" else 1
    return status


def partial_document(progress: Progress, total: int, elapsed: float, why: str) -> dict[str, object]:
    """``--json`` when the demo did not finish: what had happened by then."""
    return {
        "jobs": total,
        "ended_by": why,
        "seconds": round(elapsed, 3),
        "states": dict(progress.counts()),
        "recipe_steps": progress.steps_done,
    }


def ui_url(environ: dict[str, str]) -> str:
    return f"http://127.0.0.1:{environ['GATEWAY_HTTP_PORT']}/ui/"


def demo_command() -> Command:
    return Command(
        "demo",
        "run a simulated station end to end: MES, gateway, recipe engine, equipment",
        _configure,
        _run,
    )
