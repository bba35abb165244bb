"""``gateway jobs ...`` and ``gateway config push``: drive a station by hand, as an MES does.

For commissioning and troubleshooting: store a job order from a file, start it, watch its states,
read its Job Response, clear it, push a Work Master, all over MQTT through the same commands
topic an MES uses (``JobsClient``). Tables for people; ``--json`` for scripts (one JSON document,
or one per line for ``watch``). Exit status 0: done; 1: the gateway refused or did not answer,
or the broker cannot be reached (the message says which); 2: wrong usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import anyio
from rich.console import Console

from gateway.app import load_gateway_settings
from gateway.cli import Command
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage
from gateway.controls import EditOp
from gateway.documents import DocumentError, read_document
from gateway.errors import GatewayError
from gateway.mqttclient import BrokerUnreachable, CloudEventClient, connect_client
from gateway.plugins import GatewayPluginManager
from gateway.topics import ANY, CLI_REPLY_PREFIX, JOBS_PREFIX, MesTopics, check_topic_prefix
from gateway_jobs.breakpoints import BREAKPOINT_METHOD, BREAKPOINT_TYPE
from gateway_jobs.client import LISTED_STATES, JobsClient, config_kinds, job_order_payload
from gateway_jobs.config import ACKNOWLEDGEMENT, CONFIG_KINDS, ONLINE
from gateway_jobs.editing import EDIT_METHOD, EDIT_TYPE
from gateway_jobs.tables import (
    error,
    job_table,
    jobs_table,
    queue_table,
    results,
    short_state,
    short_time,
    state_path,
)

DEFAULT_MQTT_URL = "mqtt://localhost:1883"
RETAINED_QUIET_SECONDS = 0.3  # no retained message for this long after the subscription: all came
MAX_RETAINED = 100_000  # bounds what a listing reads of a broker's retained messages
# Methods that take a JobOrderID: action name -> OPC 40001-3 method.
JOB_ACTIONS = {
    "start": "Start",
    "revoke-start": "RevokeStart",
    "pause": "Pause",
    "resume": "Resume",
    "stop": "Stop",
    "abort": "Abort",
    "cancel": "Cancel",
    "clear": "Clear",
}

EDIT_HELP = (
    "add (a new step at the end), insert (after STEP), replace (STEP), delete (STEP), reset "
    "(drop every step not begun)"
)

Action = Callable[[argparse.Namespace, JobsClient, Console], Awaitable[None]]


# -- arguments ----------------------------------------------------------------------------------


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where the station is")
    where.add_argument(
        "-s",
        "--scope",
        default=None,
        help="station scope (CloudEvent subject); default: the scope the station publishes, "
        "when it publishes one only",
    )
    where.add_argument(
        "--mqtt",
        default=None,
        help=f"broker URL (mqtt://user:password@host:port, mqtts:// for TLS); default: mqtt.url "
        f"of the settings, else {DEFAULT_MQTT_URL}",
    )
    where.add_argument("--prefix", default=None, help="topic prefix; default: jobs.topic_prefix")
    where.add_argument(
        "--reply-prefix",
        default=None,
        help="topic prefix the replies come back under (<prefix>/<client id>); the broker's ACL "
        f"must let the gateway write there and you read; default: jobs.cli_reply_prefix "
        f"({CLI_REPLY_PREFIX})",
    )
    where.add_argument("-c", "--config", type=Path, default=None, help="settings file (TOML)")
    where.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the broker and replies"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _configure_jobs(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=help)
        _add_connection_options(sub)
        return sub

    listing = action("list", "the scope's jobs and their states")
    listing.add_argument(
        "--state",
        action="append",
        choices=LISTED_STATES,
        help="only jobs in this top-level state (repeatable)",
    )
    listing.set_defaults(run=_list)
    show = action("show", "one job's state and Job Response (results)")
    show.add_argument("job", metavar="JOB", help="JobOrderID")
    show.set_defaults(run=_show)
    store = action("store", "store a job order from a JSON or YAML file")
    store.add_argument("file", metavar="FILE", help="a JobOrder, or {JobOrder: ..., Comment: ...}")
    store.add_argument("--start", action="store_true", help="StoreAndStart: allowed to start")
    store.set_defaults(run=_store)
    for name, method in JOB_ACTIONS.items():
        act = action(name, f"call {method} on a job")
        act.add_argument("job", metavar="JOB", help="JobOrderID")
        act.add_argument("--comment", default=None, help="a comment for the MES method call")
        act.set_defaults(run=_act, method=method)
    breakpoint = action(
        "breakpoint",
        "pause a job (or every job of a Work Master) before a step; Resume goes on",
    )
    breakpoint.add_argument("step", metavar="STEP", help="the step (action) to pause before")
    target = breakpoint.add_mutually_exclusive_group(required=True)
    target.add_argument("--job", default=None, help="JobOrderID of a job that has not ended")
    target.add_argument("--work-master", default=None, help="WorkMasterID: every job of it")
    breakpoint.add_argument("--clear", action="store_true", help="clear it instead of setting it")
    breakpoint.set_defaults(run=_breakpoint)
    edit = action("edit", "add, insert, replace, delete or reset the steps a job has not begun")
    edit.add_argument("job", metavar="JOB", help="JobOrderID of a job that has not ended")
    edit.add_argument("edit", choices=[op.value for op in EditOp], metavar="EDIT", help=EDIT_HELP)
    edit.add_argument("step", nargs="?", default=None, metavar="STEP", help="the step it is about")
    edit.add_argument("--new", default=None, metavar="FILE", help="the new step (JSON or YAML)")
    edit.add_argument("--expect", default=None, help="the RecipeVersion the edit is made against")
    edit.set_defaults(run=_edit)
    watch = action("watch", "print the scope's status events as they arrive (Ctrl-C ends)")
    watch.add_argument("--count", type=int, default=None, help="end after this many events")
    watch.set_defaults(run=_watch)


def _configure_scope(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    offline = actions.add_parser(
        "offline", help="no queued job starts; running ones finish (config.online)"
    )
    offline.add_argument("--reason", default=None, help="why, for the MES and other operators")
    offline.set_defaults(run=_offline)
    online = actions.add_parser("online", help="queued jobs start again")
    online.set_defaults(run=_online)
    queue = actions.add_parser("queue", help="the jobs running and waiting, in order")
    queue.set_defaults(run=_queue)
    acknowledge = actions.add_parser(
        "acknowledge",
        help="release equipment an unsafe failure blocked, so queued jobs may use it again "
        "(config.acknowledgement)",
    )
    acknowledge.add_argument(
        "equipment", nargs="*", metavar="EQUIPMENT", help="the equipment (default: all blocked)"
    )
    acknowledge.add_argument("--by", required=True, help="who acknowledges (traced)")
    acknowledge.set_defaults(run=_acknowledge)
    for sub in (offline, online, queue, acknowledge):
        _add_connection_options(sub)


def _configure_push(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=CONFIG_KINDS, metavar="KIND", help=config_kinds())
    parser.add_argument("file", metavar="FILE", help="the document, JSON or YAML ('-': stdin)")
    parser.add_argument("--delete", action="store_true", help="DELETE instead of PUT")
    _add_connection_options(parser)
    parser.set_defaults(run=_push)


# -- running ----------------------------------------------------------------------------------


def _run(args: argparse.Namespace, plugins: GatewayPluginManager) -> int:
    """Connect, run the action, turn every expected failure into one line on stderr."""
    out = Console(soft_wrap=True, highlight=False)
    where: Where | None = None
    try:
        where = _where(args, plugins)
        anyio.run(_session, args, where.url, where.prefix, where.replies, out)
    except BrokerUnreachable as error:  # which setting to fix, and where its value came from
        origin = f" (the broker URL from {where.url_from})" if where is not None else ""
        print(f"gateway {args.command}: {error}{origin}", file=sys.stderr)
        return 1
    except (GatewayError, DocumentError) as error:
        print(f"gateway {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


async def _session(
    args: argparse.Namespace, url: str, prefix: str, replies: str, out: Console
) -> None:
    async with connect_client(url, reply_prefix=replies, connect_timeout=args.timeout) as client:
        if args.scope is None:
            args.scope = await _only_scope(client, prefix)
        jobs = JobsClient(client, prefix, args.scope, timeout=args.timeout)
        action: Action = args.run
        await action(args, jobs, out)


async def _retained(client: CloudEventClient, topic_filter: str) -> list[MqttMessage]:
    """The retained messages of ``topic_filter``: the broker sends them right after the
    subscription; what has not come after ``RETAINED_QUIET_SECONDS`` of quiet is not there."""
    found: list[MqttMessage] = []
    async with client.watch(topic_filter) as stream:
        while True:
            with anyio.move_on_after(RETAINED_QUIET_SECONDS) as quiet:
                found.append(await stream.receive())
            if quiet.cancelled_caught or len(found) >= MAX_RETAINED:
                return found


async def _only_scope(client: CloudEventClient, prefix: str) -> str:
    """The scope when the station publishes one only (its retained state index)."""
    messages = await _retained(client, MesTopics(prefix).state_index(ANY))
    scopes = sorted({m.topic.split("/")[-2] for m in messages if m.payload})
    if len(scopes) == 1:
        return scopes[0]
    known = f"the station publishes {', '.join(scopes)}" if scopes else "none is published yet"
    raise GatewayError(f"name the scope with -s SCOPE ({known})")


async def _priorities(jobs: JobsClient) -> dict[str, int]:
    """Each job's Priority, from the job orders the station keeps retained for the MES (a job
    order without one counts as 0; a station without the MES publisher gives none)."""
    found: dict[str, int] = {}
    topic = MesTopics(jobs.topic_prefix).order(jobs.scope, ANY)
    for message in await _retained(jobs.client, topic):
        try:
            order = json.loads(message.payload)
        except ValueError:
            continue
        order = order.get("JobOrder", order) if isinstance(order, Mapping) else None
        if isinstance(order, Mapping) and isinstance(order.get("JobOrderID"), str):
            priority = order.get("Priority")
            found[order["JobOrderID"]] = priority if isinstance(priority, int) else 0
    return found


class Where(NamedTuple):
    url: str
    prefix: str
    replies: str
    url_from: str  # --mqtt, or where mqtt.url came from


def _where(args: argparse.Namespace, plugins: GatewayPluginManager) -> Where:
    """Broker URL, topic prefix and reply prefix: the options, else the settings (file and
    environment)."""
    loaded = load_gateway_settings(plugins, args.config)
    settings = dict(loaded.items())
    url = args.mqtt or getattr(settings.get("mqtt"), "url", None) or DEFAULT_MQTT_URL
    url_from = "--mqtt" if args.mqtt else f"mqtt.url, {loaded.origin('mqtt.url')}"
    prefix = args.prefix or getattr(settings.get("jobs"), "topic_prefix", JOBS_PREFIX)
    replies = args.reply_prefix or getattr(
        settings.get("jobs"), "cli_reply_prefix", CLI_REPLY_PREFIX
    )
    try:
        check_topic_prefix("--reply-prefix", replies)
    except ValueError as error:
        raise GatewayError(str(error)) from None
    if url.startswith("memory://"):
        raise GatewayError(
            f"{url} is a broker inside a gateway process; give a real broker with --mqtt"
        )
    return Where(url, prefix, replies, url_from)


def _print_json(out: Console, data: Any) -> None:
    out.print_json(json.dumps(data), indent=None if out.is_terminal is False else 2)


# -- actions ----------------------------------------------------------------------------------


async def _list(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    states = tuple(args.state) if args.state else LISTED_STATES
    responses = await jobs.job_responses(states)
    if args.json:
        _print_json(out, responses)
        return
    if not responses:
        out.print(f"no jobs in scope {jobs.scope}")
        return
    out.print(jobs_table(jobs.scope, responses, await _priorities(jobs), out.width))


async def _show(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    response = await jobs.job_response(args.job)
    if args.json:
        _print_json(out, response)
        return
    out.print(job_table(args.job, response, out.width))


async def _store(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    payload = job_order_payload(read_document(args.file))
    await jobs.store(payload, start=args.start)
    job = payload.get("JobOrder", payload.get("job_order", {})).get("JobOrderID", "?")
    method = "StoreAndStart" if args.start else "Store"
    _done(args, out, method, job)


async def _act(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    await jobs.act(args.method, args.job, args.comment)
    _done(args, out, args.method, args.job)


async def _breakpoint(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    data: dict[str, Any] = {"Step": args.step, "Enabled": not args.clear}
    if args.job is not None:
        data["JobOrderID"] = args.job
    else:
        data["WorkMasterID"] = args.work_master
    await jobs.request(BREAKPOINT_TYPE, data)
    target = f"job {args.job}" if args.job is not None else f"Work Master {args.work_master}"
    if args.json:
        _print_json(out, {"method": BREAKPOINT_METHOD, **data, "ReturnStatus": 1})
    else:
        done = "cleared" if args.clear else "set"
        out.print(f"breakpoint before {args.step} of {target}: {done}")


async def _edit(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    data: dict[str, Any] = {"JobOrderID": args.job, "Edit": args.edit}
    if args.step is not None:
        data["Step"] = args.step
    if args.new is not None:
        data["NewStep"] = read_document(args.new)
    if args.expect is not None:
        data["RecipeVersion"] = args.expect
    reply = await jobs.request(EDIT_TYPE, data)
    if args.json:
        _print_json(out, {"method": EDIT_METHOD, **data, **reply})
    else:
        out.print(f"{args.edit} {args.job}: done, recipe {reply.get('RecipeVersion')}")


def _done(args: argparse.Namespace, out: Console, method: str, job: str) -> None:
    if args.json:
        _print_json(out, {"method": method, "JobOrderID": job, "ReturnStatus": 1})
    else:
        out.print(f"{method} {job}: done")


async def _watch(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    seen = 0
    async with jobs.status_events() as events:
        print(f"watching {jobs.events_topic} (Ctrl-C ends)", file=sys.stderr, flush=True)
        async for event in events:
            _print_event(args, out, event)
            seen += 1
            if args.count is not None and seen >= args.count:
                return


def _print_event(args: argparse.Namespace, out: Console, event: CloudEvent) -> None:
    data = event.data if isinstance(event.data, Mapping) else {}
    order = data.get("JobOrder")
    job = str(order.get("JobOrderID", "?")) if isinstance(order, Mapping) else "?"
    state = state_path(data)
    if args.json:
        time = event.time.isoformat() if event.time else None
        line = {"time": time, "JobOrderID": job, "state": state, "event": data}
        if event.causationid:
            line["causationid"] = event.causationid
        out.print(json.dumps(line), soft_wrap=True, markup=False, highlight=False)
        return
    result = ""
    response = data.get("JobResponse")
    if isinstance(response, Mapping):
        result = f"  {len(results(response))} results"
        if failed := error(response):
            result += f"  {failed}"
    text = f"{short_time(event.time)}  {job}  {short_state(state)}{result}"
    out.print(text, markup=False, overflow="ellipsis", no_wrap=True, crop=True)


async def _push(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    document = read_document(args.file)
    await jobs.configure(args.kind, document, delete=args.delete)
    name = document.get("ID", "") if isinstance(document, Mapping) else ""
    verb = "DELETE" if args.delete else "PUT"
    if args.json:
        _print_json(out, {"kind": args.kind, "method": verb, "ID": name, "ReturnStatus": 1})
    else:
        out.print(f"{verb} {args.kind} {name}: done".replace("  ", " "), markup=False)


async def _offline(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    document: dict[str, Any] = {"Online": False}
    if args.reason:
        document["Reason"] = args.reason
    await jobs.configure(ONLINE, document)
    _said(args, out, f"scope {jobs.scope} is offline: queued jobs wait", document)


async def _online(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    await jobs.configure(ONLINE, None, delete=True)
    _said(args, out, f"scope {jobs.scope} is online", {"Online": True})


async def _acknowledge(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    document: dict[str, Any] = {"AcknowledgedBy": args.by}
    if args.equipment:
        document["EquipmentIDs"] = list(args.equipment)
    await jobs.configure(ACKNOWLEDGEMENT, document)
    what = ", ".join(args.equipment) or "all blocked equipment"
    _said(args, out, f"scope {jobs.scope}: {what} acknowledged by {args.by}", document)


def _said(args: argparse.Namespace, out: Console, text: str, document: dict[str, Any]) -> None:
    if args.json:
        _print_json(out, {"Scope": args.scope, **document, "ReturnStatus": 1})
    else:
        out.print(text, markup=False)


async def _queue(args: argparse.Namespace, jobs: JobsClient, out: Console) -> None:
    queue = await jobs.queue()
    if args.json:
        _print_json(out, queue)
        return
    online = "online" if queue.get("Online") else f"OFFLINE ({queue.get('Reason') or 'no reason'})"
    capacity = queue.get("MaxRunningJobOrders") or "unlimited"
    out.print(f"scope {jobs.scope}: {online}, runs {capacity} at once", markup=False)
    out.print(queue_table(queue, out.width))
    unlisted = {  # the topic lists the first [jobs] queue_feed_jobs of each
        kind: queue.get(f"{kind.capitalize()}Count", 0) - len(queue.get(kind.capitalize()) or [])
        for kind in ("running", "waiting")
    }
    if any(unlisted.values()):
        more = ", ".join(f"{count} more {kind}" for kind, count in unlisted.items() if count)
        out.print(f"({more}, not listed)", markup=False)


def jobs_command() -> Command:
    return Command(
        "jobs",
        "list, show, store, start, pause, resume, stop, abort, cancel, clear and watch jobs over "
        "MQTT, as an MES does",
        _configure_jobs,
        _run,
    )


def scope_command() -> Command:
    return Command(
        "scope",
        "take a scope offline or online, or show its queue, over MQTT",
        _configure_scope,
        _run,
    )


def config_push_command() -> Command:
    return Command(
        "config push",
        "send station configuration (workmaster, equipment, ...) from a file, as an MES does",
        _configure_push,
        _run,
    )
