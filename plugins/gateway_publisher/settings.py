"""The ``[publisher]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import Settings, setting
from gateway.topics import JOBS_PREFIX
from gateway.transport import MQTT_BINDING
from gateway_jobs import JobsSettings

DEFAULT_TOPIC_PREFIX = JOBS_PREFIX  # the job management plugin's default, when it is not loaded


@dataclass(frozen=True)
class PublisherSettings:
    topic_prefix: str = setting(
        "",
        "Prefix of the retained MES topics (<prefix>/<scope>/state-index, .../order/<id>, "
        ".../result/<id>); empty: the [jobs] topic_prefix, so the MES finds everything under one",
    )
    retained_ttl_seconds: int = setting(
        172_800,
        "MQTT message expiry of the retained topics (48 h): removes the topics of jobs that are "
        "never cleared; 0: they never expire",
        minimum=0,
    )
    read_count: int = setting(
        200,
        "Change records read from one scope at once; each batch publishes one state index",
        minimum=1,
    )
    read_pause_ms: int = setting(
        20,
        "While changes keep coming, the change streams are read at most every this many ms, "
        "so the changes of a burst make one batch (one index, one commit); the first change "
        "after a quiet spell is published at once, a change right after another at most this "
        "much later. 0: a read per wake",
        minimum=0,
    )
    lease_seconds: float = setting(
        10.0,
        "Lease that keeps one publisher active among replicas (e.g. during a rolling update); "
        "a standby takes over this long after the active one died without releasing it",
        minimum=1.0,
    )
    binding: str = setting(MQTT_BINDING, "Binding the retained topics are published on")
    index_pages: bool = setting(
        False,
        "Opt-in for scopes with thousands of jobs: the state index lists pages instead of jobs, "
        "and the jobs are retained in pages on <prefix>/<scope>/index/<page> (an update then "
        "republishes only the pages it changed). Off (the default): the state index lists every "
        "job inline, as the MicroDCS MES publishing design defines it",
    )
    index_page_size: int = setting(
        25, "Jobs per page of the state index when index_pages is on", minimum=1
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        prefix = self.topic_prefix
        if prefix and (prefix.startswith("/") or prefix.endswith("/") or set("+#") & set(prefix)):
            raise ValueError(
                f"topic_prefix: expected topic levels without wildcards, got {prefix!r}"
            )


def effective_topic_prefix(publisher: PublisherSettings, settings: Settings) -> str:
    """The configured prefix, else the job management plugin's (its public ``JobsSettings``),
    else that plugin's default."""
    if publisher.topic_prefix:
        return publisher.topic_prefix
    jobs = settings.find(JobsSettings)
    return jobs.topic_prefix if jobs is not None and jobs.topic_prefix else DEFAULT_TOPIC_PREFIX
