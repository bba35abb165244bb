"""Sparkplug B topic namespace (Sparkplug 3.0, chapter 4).

``spBv1.0/<group_id>/<message type>/<edge_node_id>[/<device_id>]``, and the primary host
application's ``spBv1.0/STATE/<host_id>``. Ids are UTF-8 text without ``/``, ``+`` or ``#``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

NAMESPACE = "spBv1.0"
_FORBIDDEN = frozenset("/+#")


class MessageType(StrEnum):
    NBIRTH = "NBIRTH"
    NDEATH = "NDEATH"
    NDATA = "NDATA"
    NCMD = "NCMD"
    DBIRTH = "DBIRTH"
    DDEATH = "DDEATH"
    DDATA = "DDATA"
    DCMD = "DCMD"

    @property
    def node(self) -> bool:
        """About the edge node itself (no device id in the topic)."""
        return self.value.startswith("N")


def valid_id(text: str) -> bool:
    """Whether ``text`` may be a group, edge node, device or host id."""
    return bool(text) and not _FORBIDDEN & set(text)


def topic(group_id: str, kind: MessageType, edge_node_id: str, device_id: str | None = None) -> str:
    parts = [NAMESPACE, group_id, kind.value, edge_node_id]
    if device_id is not None:
        parts.append(device_id)
    return "/".join(parts)


def state_topic(host_id: str) -> str:
    return f"{NAMESPACE}/STATE/{host_id}"


@dataclass(frozen=True)
class Topic:
    """A parsed Sparkplug topic (not STATE)."""

    group_id: str
    kind: MessageType
    edge_node_id: str
    device_id: str | None = None


def parse_topic(text: str) -> Topic | None:
    """The parts of ``text``; ``None`` for a topic outside the namespace, STATE, or malformed."""
    parts = text.split("/")
    if len(parts) not in (4, 5) or parts[0] != NAMESPACE:
        return None
    try:
        kind = MessageType(parts[2])
    except ValueError:
        return None
    if kind.node != (len(parts) == 4):
        return None
    return Topic(parts[1], kind, parts[3], parts[4] if len(parts) == 5 else None)
