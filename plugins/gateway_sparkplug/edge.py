"""One edge node's Sparkplug session: births, deaths, data by exception, ``seq`` and aliases.

Pure bookkeeping, no I/O: each method returns the messages to publish, in order, so the rules
of the specification (Sparkplug 3.0) live in one place and are tested without a broker:

- NBIRTH has ``seq`` 0 and the ``bdSeq`` of the connection's Will (NDEATH, which has no
  ``seq``); every later message of the node and its devices takes the next ``seq``, modulo 256;
- a birth names each metric and gives it an alias unique within the edge node; data messages
  carry only the aliases and only what changed since the last message (report by exception);
- a device whose metric names change, or that comes back, is born again (DBIRTH); one that goes
  away gets a DDEATH;
- a rebirth (NCMD ``Node Control/Rebirth``) repeats NBIRTH (``seq`` 0, same ``bdSeq``) and
  every device's DBIRTH, with aliases assigned anew.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway_sparkplug.payloads import Metric, Value, encode
from gateway_sparkplug.schema import DataType
from gateway_sparkplug.topics import MessageType, topic

BD_SEQ = "bdSeq"
REBIRTH = "Node Control/Rebirth"

Tags = Mapping[str, Value]


@dataclass(frozen=True)
class Device:
    """A device's tags as they are now; ``alive`` False: it is dead (DDEATH)."""

    tags: Tags
    alive: bool = True


@dataclass(frozen=True)
class Message:
    topic: str
    payload: bytes
    kind: MessageType
    device_id: str | None = None


class EdgeNode:
    """The state of one edge node's session (one connection, one ``bdSeq``)."""

    def __init__(
        self, group_id: str, edge_node_id: str, bd_seq: int, clock_ms: Callable[[], int]
    ) -> None:
        self.group_id = group_id
        self.edge_node_id = edge_node_id
        self.bd_seq = bd_seq
        self.clock_ms = clock_ms
        self._seq = 0
        self._next_alias = 1
        self._aliases: dict[tuple[str | None, str], int] = {}
        self._node: dict[str, Value] = {}
        self._devices: dict[str, dict[str, Value]] = {}  # devices born and alive
        self._dead: set[str] = set()  # devices that had a DDEATH and are still known

    # -- messages ---------------------------------------------------------------------------

    def death(self) -> Message:
        """The NDEATH (the connection's Will): ``bdSeq`` only, no ``seq``."""
        metric = Metric(None, Value(DataType.INT64, self.bd_seq), self.clock_ms(), BD_SEQ)
        payload = encode([metric], timestamp=self.clock_ms(), seq=None)
        return Message(self._topic(MessageType.NDEATH), payload, MessageType.NDEATH)

    def birth(self, node: Tags, devices: Mapping[str, Device]) -> list[Message]:
        """NBIRTH and every device's DBIRTH (and a DDEATH right after for dead devices, so a
        host shows their last values as stale)."""
        self._seq = 0
        self._aliases.clear()
        self._next_alias = 1
        self._devices.clear()
        self._dead.clear()
        now = self.clock_ms()
        metrics = [
            Metric(None, Value(DataType.INT64, self.bd_seq), now, BD_SEQ),
            self._named(None, REBIRTH, Value(DataType.BOOLEAN, False), now),
            *(self._named(None, name, value, now) for name, value in node.items()),
        ]
        self._node = dict(node)
        messages = [self._message(MessageType.NBIRTH, None, metrics, now)]
        for device_id in sorted(devices):
            messages.append(self._device_birth(device_id, devices[device_id].tags, now))
            if not devices[device_id].alive:
                messages.append(self._device_death(device_id, now))
        return messages

    def update(self, node: Tags, devices: Mapping[str, Device]) -> list[Message]:
        """What changed since the last message: NDATA, DDATA, DBIRTH, DDEATH."""
        now = self.clock_ms()
        messages = []
        changed = self._changed(None, self._node, node, now)
        if changed:
            self._node = dict(node)
            messages.append(self._message(MessageType.NDATA, None, changed, now))
        for device_id in sorted(set(devices) | set(self._devices)):
            device = devices.get(device_id)
            before = self._devices.get(device_id)
            if device is None or not device.alive:
                if before is not None:
                    messages.append(self._device_death(device_id, now))
                if device is None:
                    self._dead.discard(device_id)
                continue
            if before is None or set(before) != set(device.tags):
                messages.append(self._device_birth(device_id, device.tags, now))
                continue
            changed = self._changed(device_id, before, device.tags, now)
            if changed:
                self._devices[device_id] = dict(device.tags)
                messages.append(self._message(MessageType.DDATA, device_id, changed, now))
        return messages

    @property
    def next_seq(self) -> int:
        return self._seq

    def alias(self, device_id: str | None, name: str) -> int | None:
        """The alias the last birth gave ``name`` (of the node: ``device_id`` None)."""
        return self._aliases.get((device_id, name))

    # -- helpers ----------------------------------------------------------------------------

    def _device_birth(self, device_id: str, tags: Tags, now: int) -> Message:
        metrics = [self._named(device_id, name, value, now) for name, value in tags.items()]
        self._devices[device_id] = dict(tags)
        self._dead.discard(device_id)
        return self._message(MessageType.DBIRTH, device_id, metrics, now)

    def _device_death(self, device_id: str, now: int) -> Message:
        self._devices.pop(device_id, None)
        self._dead.add(device_id)
        return self._message(MessageType.DDEATH, device_id, [], now)

    def _named(self, device_id: str | None, name: str, value: Value, now: int) -> Metric:
        """A birth's metric: its name, and an alias new in this session for a new name."""
        key = (device_id, name)
        alias = self._aliases.get(key)
        if alias is None:
            alias = self._aliases[key] = self._next_alias
            self._next_alias += 1
        return Metric(alias, value, now, name)

    def _changed(
        self, device_id: str | None, before: Mapping[str, Value], after: Tags, now: int
    ) -> list[Metric]:
        return [
            Metric(self._aliases[(device_id, name)], value, now)
            for name, value in after.items()
            if before.get(name) != value and (device_id, name) in self._aliases
        ]

    def _message(
        self, kind: MessageType, device_id: str | None, metrics: list[Metric], now: int
    ) -> Message:
        payload = encode(metrics, timestamp=now, seq=self._seq)
        self._seq = (self._seq + 1) % 256
        return Message(self._topic(kind, device_id), payload, kind, device_id)

    def _topic(self, kind: MessageType, device_id: str | None = None) -> str:
        return topic(self.group_id, kind, self.edge_node_id, device_id)
