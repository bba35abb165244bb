"""The ``[jobs]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import setting
from gateway.topics import CLI_REPLY_PREFIX, JOBS_PREFIX, MES_REPLY_PREFIX

NO_LIMIT = 0xFFFF  # OPC UA: MaxDownloadableJobOrders = max UInt16 means "no limit"


@dataclass(frozen=True)
class JobsSettings:
    topic_prefix: str = setting(
        JOBS_PREFIX,
        "MES topics: <prefix>/<scope>/commands, <prefix>/<scope>/events, <prefix>/metadata",
    )
    cli_reply_prefix: str = setting(
        CLI_REPLY_PREFIX,
        "Where `gateway jobs`, `gateway scope` and `gateway config push` ask for their replies "
        "(<prefix>/<client id>): under the MES's reply prefix, so they work as the MES's broker "
        "user under the shipped ACL (--reply-prefix overrides it)",
    )
    max_job_orders: int = setting(
        NO_LIMIT,
        "Job orders a scope may hold at once (cleared ones do not count; 65535: no limit); "
        "the MES overrides it per scope with config.jobacceptance",
        minimum=0,
    )
    default_work_master: str = setting(
        "",
        "Work Master a job order naming none runs (empty: such a job order is refused); "
        "the MES overrides it per scope with config.jobacceptance DefaultWorkMasterID",
    )
    max_running_job_orders: int = setting(
        1,
        "Jobs a scope runs at once (0: no limit); the others wait in its queue; the MES "
        "overrides it per scope with MaxRunningJobOrders in config.jobacceptance",
        minimum=0,
    )
    equipment_allocation: bool = setting(
        True,
        "A running job holds the equipment its recipe commands and its EquipmentRequirements "
        "(jobs needing the same equipment never run together); false: only the capacity bounds "
        "running jobs (load tests, equipment that serves several jobs at once)",
    )
    block_unsafe_failures: bool = setting(
        True,
        "Equipment a job touched that failed unsafe (its rollback failed: Rollback FAILED_UNSAFE) "
        "takes no new job until acknowledged (gateway scope acknowledge, config.acknowledgement, "
        "the web UI); false: never blocked",
    )
    dispatch_poll_seconds: float = setting(
        1.0,
        "How often every instance looks for queued jobs that may start (a job ending or "
        "entering the queue starts the next one at once; this catches what a crash left)",
        minimum=0.01,
    )
    dispatch_release_delay_ms: int = setting(
        50,
        "A job that ends (or leaves the queue) lets the queue's next job start after at most "
        "this many ms: the pass waits for one that another change asks for (an MES that clears "
        "a job and stores the next at once), which covers it, so there is one pass where there "
        "would be two. 0: a pass at once after every release",
        minimum=0,
    )
    results_wait_seconds: float = setting(
        10.0,
        "After the MES stops or aborts a job its recipe ran, how long its Job Response waits "
        "for the results the recipe collected before it is final (has_result) without them",
        minimum=0,
    )
    queue_feed_ms: int = setting(
        200,
        "Least time between two publications of a scope's retained queue topic (changes "
        "meanwhile are merged into the next one)",
        minimum=0,
    )
    queue_feed_jobs: int = setting(
        100,
        "Jobs the retained queue topic lists at most, running and waiting each (the first "
        "ones; the topic gives both totals)",
        minimum=1,
    )
    retry_limit: int = setting(
        200,
        "Attempts of one state change when other instances keep changing the same job",
        minimum=1,
    )
    reply_topic_prefixes: list[str] = setting(
        [MES_REPLY_PREFIX],
        "Where replies to the MES's commands may go: a command's Response Topic must be under "
        "one of these prefixes (the command line's replies come under mes/replies too), or "
        "no reply is sent (counted and logged once per topic)",
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        if self.max_job_orders > NO_LIMIT:
            raise ValueError(f"max_job_orders: expected 0..{NO_LIMIT}, got {self.max_job_orders}")
        prefix = self.topic_prefix
        if not prefix or prefix.startswith("/") or prefix.endswith("/") or set("+#") & set(prefix):
            raise ValueError(
                f"topic_prefix: expected topic levels without wildcards, got {prefix!r}"
            )
