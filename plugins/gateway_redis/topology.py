"""Which Redis deployment ``redis.url`` names: one node, a Sentinel-watched master, a Cluster.

- ``redis://host:port/db``, ``rediss://...`` (TLS), ``unix:///path``: one node;
- ``redis+sentinel://[user:password@]host:port,host2:port/<master name>[/db]``: the master
  the Sentinels at those addresses name (``rediss+sentinel://``: TLS to Sentinels and master);
  the user and password are the data nodes' (``redis.sentinel_password`` for the Sentinels);
- ``redis+cluster://[user:password@]host:port,host2:port``: a Redis Cluster reached through
  any of those seed nodes (``rediss+cluster://``: TLS). A Cluster has database 0 only.

The same store contract holds on all three (``gateway.store``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

SENTINEL_PORT = 26379
REDIS_PORT = 6379


class Topology(enum.Enum):
    SINGLE = "single"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


@dataclass(frozen=True)
class Deployment:
    """``redis.url`` taken apart (without credentials)."""

    topology: Topology
    nodes: tuple[tuple[str, int], ...] = ()  # Sentinels, or Cluster seed nodes
    service: str = ""  # the Sentinel master name
    db: int = 0
    tls: bool = False


def parse_deployment(url: str) -> Deployment:
    """``url`` taken apart; ``ValueError`` saying what is wrong."""
    parts = urlsplit(url)
    base, _, kind = parts.scheme.partition("+")
    if not kind:
        return Deployment(Topology.SINGLE, tls=base == "rediss")
    if base not in ("redis", "rediss") or kind not in ("sentinel", "cluster"):
        raise ValueError(f"unknown Redis URL scheme {parts.scheme!r}")
    topology = Topology.SENTINEL if kind == "sentinel" else Topology.CLUSTER
    default_port = SENTINEL_PORT if topology is Topology.SENTINEL else REDIS_PORT
    nodes = _nodes(parts.netloc.rpartition("@")[2], default_port)
    path = [unquote(part) for part in parts.path.split("/") if part]
    if topology is Topology.CLUSTER:
        if path not in ([], ["0"]):
            raise ValueError("a Redis Cluster URL names no master and no database other than 0")
        return Deployment(topology, nodes, tls=base == "rediss")
    if not path or len(path) > 2:
        raise ValueError("a Sentinel URL ends with /<master name> or /<master name>/<db>")
    db = path[1] if len(path) == 2 else "0"
    if not db.isdigit():
        raise ValueError(f"the database must be a number, got {db!r}")
    return Deployment(topology, nodes, service=path[0], db=int(db), tls=base == "rediss")


def _nodes(hosts: str, default_port: int) -> tuple[tuple[str, int], ...]:
    nodes = []
    for host in hosts.split(","):
        # Parsed one by one as a URL's host, so IPv6 literals ([::1]:26379) work too.
        parts = urlsplit(f"//{host}")
        if not parts.hostname:
            raise ValueError(f"expected host:port, got {host!r}")
        nodes.append((parts.hostname, parts.port or default_port))
    return tuple(nodes)
