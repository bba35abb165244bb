"""Where the recipe runtime keeps things in Redis (every scoped key carries the scope's hash tag).

Per scope:

- ``rt:work`` stream, consumer group ``recipe-runtime``: the work no message carries (MES
  command, due timer, a report of a hold, a command to send again; a start the instance that
  admitted the job could not handle itself); XREADGROUP hands each to one instance,
  XAUTOCLAIM hands the entries of a dead instance to a live one. Equipment replies and events
  do not pass through it: they are applied by the instance that receives them.
- ``rt:exec:<job>``: the execution state (``gateway_runtime.state``), changed only by the CAS
  script (``gateway_runtime.scripts``), which also writes the follow-up entries and timers.
- ``rt:recipe:<job>``: the recipe and parameters the job started with (a snapshot, so a
  Work Master changed meanwhile does not change a running job).
- ``rt:history:<job>`` hash: the job's actions that are done, by name (the last activation
  of each), moved out of the state by the commit that finishes them: the state, written on
  every step, holds what is still going on, however long the recipe. For the operator view.
- ``rt:timers`` sorted set: durable timers by due time; any instance moves due ones to the
  stream atomically (so each fires once) — they survive every restart.
- ``rt:waiting`` sorted set: jobs with a ``pull_event`` waiting, oldest first, where an
  incoming equipment event looks for its taker; ``rt:unclaimed``: recent events nobody waited
  for yet (an event may overtake the state change that starts the wait; one naming no job is
  kept as the event of the job holding its equipment, and the events kept for a job go when
  it ends), and ``rt:kept:<digest>`` notes each event kept, so a retry keeps it once.
- ``rt:outbox`` sorted set: commands committed and about to be published, by the time after
  which they count as lost (the instance died between commit and publish) and are sent again.
- ``rt:active`` set: jobs not ended, for the recovery scan at start.
- ``rt:bp:<job>`` and ``rt:bp-wm:<work master>`` sets: the steps a job, or every job of a Work
  Master, pauses before (breakpoints; copied into the execution state, where the steps read
  them, when the job starts and whenever they change); ``rt:parked:<job>``: a job paused
  before its first step, which has no execution state yet (``breakpoints``), and
  ``rt:parked-jobs`` the set of them, which reconciliation looks at.

Globally: ``rt:scopes`` (every scope that ran a job, for discovery). A reply or event that
does not say its scope is looked for in each scope (``ScopeRegistry.job_scope``): no key per
job says it, so a start and an end write nothing outside their scope's commit script.
"""

from __future__ import annotations

from gateway.store import KeySchema

GROUP = "recipe-runtime"  # the work streams' consumer group


class RuntimeKeys:
    """The runtime's key names, built from the store's key schema."""

    def __init__(self, schema: KeySchema) -> None:
        self.schema = schema

    def scoped(self, scope: str, *parts: str) -> str:
        return self.schema.scoped(scope, "rt", *parts)

    def work(self, scope: str) -> str:
        return self.scoped(scope, "work")

    def execution(self, scope: str, job: str) -> str:
        return self.scoped(scope, "exec", job)

    def recipe(self, scope: str, job: str) -> str:
        return self.scoped(scope, "recipe", job)

    def history(self, scope: str, job: str) -> str:
        return self.scoped(scope, "history", job)

    def breakpoints(self, scope: str, job: str) -> str:
        return self.scoped(scope, "bp", job)

    def work_master_breakpoints(self, scope: str, work_master: str) -> str:
        return self.scoped(scope, "bp-wm", work_master)

    def parked(self, scope: str, job: str) -> str:
        return self.scoped(scope, "parked", job)

    def parked_jobs(self, scope: str) -> str:
        return self.scoped(scope, "parked-jobs")

    def timers(self, scope: str) -> str:
        return self.scoped(scope, "timers")

    def waiting(self, scope: str) -> str:
        return self.scoped(scope, "waiting")

    def unclaimed(self, scope: str) -> str:
        return self.scoped(scope, "unclaimed")

    def outbox(self, scope: str) -> str:
        return self.scoped(scope, "outbox")

    def active(self, scope: str) -> str:
        return self.scoped(scope, "active")

    @property
    def scopes(self) -> str:
        return self.schema.global_key("rt", "scopes")


def scope_of_stream(stream: str) -> str:
    """The scope of a work stream's key: ``"<prefix>:{<scope>}:rt:work"``."""
    return stream[stream.index("{") + 1 : stream.rindex("}")]
