"""``gateway sparkplug watch``: a small Sparkplug host that prints what it receives, then the
tag tree, as a SCADA host (Ignition's MQTT Engine) would list it.

It follows births (names and aliases), data and deaths of every edge node of a group; a dead
node's or device's tags are kept and marked stale, as a host shows them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
from google.protobuf.message import DecodeError

from gateway.mqttclient import BrokerUnreachable, connect_client
from gateway_sparkplug.schema import Payload
from gateway_sparkplug.topics import MessageType, parse_topic

_BIRTHS = (MessageType.NBIRTH, MessageType.DBIRTH)
_DEATHS = (MessageType.NDEATH, MessageType.DDEATH)


@dataclass
class TagTree:
    """Every tag received: ``group/node[/device]`` -> metric name -> value."""

    tags: dict[str, dict[str, Any]] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)
    aliases: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)

    def apply(self, topic: str, payload: bytes) -> str | None:
        """Take one message in; a line describing it, ``None`` for one outside Sparkplug."""
        parsed = parse_topic(topic)
        if parsed is None or parsed.kind in (MessageType.NCMD, MessageType.DCMD):
            return None
        node = f"{parsed.group_id}/{parsed.edge_node_id}"
        path = node if parsed.device_id is None else f"{node}/{parsed.device_id}"
        message = Payload()
        try:
            message.ParseFromString(payload)
        except DecodeError:
            return f"{parsed.kind} {path}: undecodable payload ({len(payload)} bytes)"
        values: dict[str, Any] = {}
        for metric in message.metrics:
            if metric.HasField("name"):
                name = metric.name
                if parsed.kind in _BIRTHS and metric.HasField("alias"):
                    self.aliases[(node, metric.alias)] = (path, name)
            else:
                name = self.aliases.get((node, metric.alias), (path, f"alias {metric.alias}"))[1]
            member = metric.WhichOneof("value")
            values[name] = None if metric.is_null or member is None else getattr(metric, member)
        if parsed.kind in _BIRTHS:
            self.tags[path] = dict(values)
            self.stale.discard(path)
        elif parsed.kind in _DEATHS:
            dead = [key for key in self.tags if key == path or key.startswith(path + "/")]
            self.stale.update(dead if parsed.kind is MessageType.NDEATH else [path])
        else:
            self.tags.setdefault(path, {}).update(values)
        seq = f" seq {message.seq}" if message.HasField("seq") else ""
        shown = ", ".join(f"{name}={_text(value)}" for name, value in values.items())
        return f"{parsed.kind}{seq} {path}: {shown}"

    def lines(self) -> list[str]:
        """The tree, one ``group/node[/device]/metric = value`` per line, sorted."""
        out = []
        for path in sorted(self.tags):
            mark = "  (stale)" if path in self.stale else ""
            for name in sorted(self.tags[path]):
                out.append(f"{path}/{name} = {_text(self.tags[path][name])}{mark}")
        return out


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def watch(
    url: str,
    group: str,
    out: TextIO,
    *,
    tree: TagTree | None = None,
    until_death: bool = False,
    seconds: float | None = None,
    ready: Callable[[], None] | None = None,
) -> TagTree:
    """Print every message of ``group`` until an NDEATH (``until_death``) or ``seconds``."""
    tree = TagTree() if tree is None else tree
    async with connect_client(url) as client, client.watch(f"spBv1.0/{group}/#") as messages:
        if ready is not None:
            ready()
        with anyio.move_on_after(seconds if seconds is not None else float("inf")):
            async for message in messages:
                line = tree.apply(message.topic, message.payload)
                if line is not None:
                    print(line, file=out, flush=True)
                if until_death and "/NDEATH/" in message.topic:
                    break
    return tree


def run_command(args: argparse.Namespace) -> int:
    """``gateway sparkplug watch``: the messages as they come, then the tag tree."""
    tree = TagTree()

    async def main() -> None:
        await watch(
            args.mqtt,
            args.group,
            sys.stdout,
            tree=tree,
            until_death=args.until_death,
            seconds=args.seconds,
        )

    status = 0
    try:
        anyio.run(main)
    except BrokerUnreachable as error:
        print(f"gateway sparkplug watch: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the tree as far as it got
        status = 130
    print("\ntag tree:")
    for line in tree.lines():
        print(f"  {line}")
    return status
