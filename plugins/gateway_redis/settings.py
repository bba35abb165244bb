"""The ``[redis]`` settings section, and the connection options derived from it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from gateway.settings import Secret, setting
from gateway_redis.topology import Deployment, Topology, parse_deployment

URL_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
)
# maxmemory-policy values that can never evict live state: only keys with a TTL (volatile-*),
# or none. The allkeys-* policies would drop jobs, queues and streams: never offered.
EVICTION_POLICIES = (
    "volatile-ttl",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "noeviction",
)
_KEY_PREFIX = re.compile(r"^[^\s{}]{1,64}$")  # braces would break the per-scope hash tag
_MASK = "********"


@dataclass(frozen=True)
class RedisSettings:
    url: str = setting(
        "",
        "Redis URL: redis://host:port/db, rediss:// for TLS or unix:///path; "
        "redis+sentinel://host:26379,host2:26379/<master name>/db for a Sentinel-watched master; "
        "redis+cluster://host:port,host2:port for a Redis Cluster (rediss+... for TLS); "
        "empty: run an embedded Redis persisting under <gateway.data_dir>/redis",
        schemes=URL_SCHEMES,
    )
    username: str = setting("", "User name (Redis ACL); overrides one given in the URL")
    password: Secret | None = setting(None, "Password; overrides one given in the URL", secret=True)
    sentinel_username: str = setting("", "User name on the Sentinels (when they require one)")
    sentinel_password: Secret | None = setting(
        None, "Password on the Sentinels (their requirepass); empty: they need none", secret=True
    )
    tls: bool = setting(False, "Connect with TLS (implied by a rediss:// URL)")
    tls_ca_file: str = setting("", "CA bundle to verify the server (TLS); empty: system CAs")
    tls_cert_file: str = setting("", "Client certificate (TLS client authentication)")
    tls_key_file: str = setting("", "Client certificate key")
    tls_verify: bool = setting(True, "Verify the server's certificate and host name")
    key_prefix: str = setting(
        "gw", "Prefix of every key the gateway writes; instances sharing work share it"
    )
    change_stream_maxlen: int = setting(
        10000,
        "Approximate length each scope's change stream is trimmed to; must cover the longest "
        "publisher outage",
        minimum=100,
    )
    dedupe_ttl_seconds: int = setting(
        86400, "How long a processed event's id (and its replies) is remembered", minimum=1
    )
    dedupe_lease_seconds: int = setting(
        30,
        "How long an event claimed by a handler that crashed stays blocked for redeliveries",
        minimum=1,
    )
    embedded_maxmemory_mb: int = setting(
        1024,
        "Memory budget of the embedded Redis, in MiB (0: none). When it is reached, Redis "
        "evicts only keys with a time to live (what the retention settings keep: ended jobs' "
        "engine state and traces, de-duplication markers), by embedded_eviction; live state "
        "never, and writes that need more wait (retried) until keys expire",
        minimum=0,
    )
    embedded_eviction: str = setting(
        "volatile-ttl",
        "Which keys with a time to live the embedded Redis evicts first at its budget: "
        "volatile-ttl (those expiring soonest: the oldest ended jobs), volatile-lru, "
        "volatile-lfu, volatile-random; noeviction: none (writes wait)",
        choices=EVICTION_POLICIES,
    )
    connect_timeout_seconds: float = setting(
        5.0, "Timeout of one connection attempt (and of a health ping)", minimum=0.1
    )
    max_connections: int = setting(
        128,
        "Most connections this instance opens at once; more work waits for a free one",
        minimum=4,
    )
    pool_timeout_seconds: float = setting(
        10.0,
        "How long work waits for a free connection before it counts as a (retried) failure",
        minimum=0.1,
    )

    cluster_poll_ms: int = setting(
        20,
        "Redis Cluster only: while nothing waits in any of the streams a reader follows over "
        "many scopes, how often it asks each node again (a blocking read cannot span slots)",
        minimum=1,
        maximum=1000,
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        scheme = urlsplit(self.url).scheme if self.url else ""
        if self.url and scheme not in URL_SCHEMES:
            raise ValueError(
                "url: expected redis://, rediss://, unix://, redis+sentinel:// or "
                f"redis+cluster://, got {scheme or self.url[:20]!r}"
            )
        if self.url:
            try:
                parse_deployment(self.url)
            except ValueError as error:
                raise ValueError(f"url: {error}") from None
        if not _KEY_PREFIX.match(self.key_prefix):
            raise ValueError(
                f"key_prefix: expected 1-64 characters without spaces or braces, "
                f"got {self.key_prefix!r}"
            )

    @property
    def embedded(self) -> bool:
        """No URL: the store runs its own Redis."""
        return not self.url

    @property
    def deployment(self) -> Deployment:
        """What the URL names: one node, a Sentinel-watched master or a Cluster."""
        if not self.url:
            return Deployment(Topology.SINGLE)
        return parse_deployment(self.url)

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.deployment.tls


def masked_url(url: str) -> str:
    """``url`` with any password replaced by asterisks, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{_MASK}@{host}"))


def connection_url(settings: RedisSettings) -> str:
    """The URL handed to redis-py: TLS scheme applied, credentials removed (passed apart)."""
    parts = urlsplit(settings.url)
    scheme = "rediss" if settings.uses_tls and parts.scheme != "unix" else parts.scheme
    return urlunsplit(parts._replace(scheme=scheme, netloc=parts.netloc.rpartition("@")[2]))


def connection_options(settings: RedisSettings) -> dict[str, Any]:
    """Keyword arguments for ``redis.asyncio.Redis.from_url(connection_url(settings))``."""
    parts = urlsplit(settings.url)
    options: dict[str, Any] = {}
    if settings.deployment.topology is Topology.SENTINEL and settings.deployment.db:
        options["db"] = settings.deployment.db
    username = settings.username or unquote(parts.username or "")
    if username:
        options["username"] = username
    if settings.password is not None:
        options["password"] = settings.password.reveal()
    elif parts.password is not None:
        options["password"] = unquote(parts.password)
    if settings.uses_tls and parts.scheme != "unix":
        options |= tls_options(settings)
    return options


def tls_options(settings: RedisSettings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "ssl_cert_reqs": "required" if settings.tls_verify else "none",
        "ssl_check_hostname": settings.tls_verify,
    }
    if settings.tls_ca_file:
        options["ssl_ca_certs"] = settings.tls_ca_file
    if settings.tls_cert_file:
        options["ssl_certfile"] = settings.tls_cert_file
    if settings.tls_key_file:
        options["ssl_keyfile"] = settings.tls_key_file
    return options
