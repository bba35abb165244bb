"""The AllowedToStart queue of a scope and the equipment its running jobs hold, in the store.

Keys, all in the scope's hash slot (``store.keys.scoped``), so every script below touches one
slot and runs unchanged on Redis Cluster::

    {p}:{scope}:queue:waiting    HASH    job -> entry: {"p": Priority, "t": StartTime (Unix s),
                                         "e": [equipment IDs]} of a job in AllowedToStart that
                                         has not been let start yet
    {p}:{scope}:queue:arrival    ZSET    job -> arrival number (the tie-break after StartTime)
    {p}:{scope}:queue:seq        STRING  the last arrival number handed out
    {p}:{scope}:queue:admitted   HASH    job -> its entry: the jobs let start, holding a slot of
                                         the capacity and their equipment until they end
    {p}:{scope}:queue:blocked    HASH    equipment -> {"job": ..., "reason": ..., "since": Unix s}:
                                         left unsafe by a failed job, until acknowledged
    {p}:{scope}:config:online    JSON    {"Online": false, "Reason": ...} while offline

Entering and leaving the queue and releasing an allocation are written in the transaction that
changes the job's state (``queue_change``, called by the repository): a job in AllowedToStart is
always queued or admitted, and a job that ended, aborted, was cancelled, cleared or revoked holds
nothing, whichever instance changed it and whenever an instance dies. Admitting is one script
(``DISPATCH``), so two instances never let the same slot or equipment go twice. It also drops
any entry whose job is no longer in a state that may hold one (reconciling against the state
indexes), so nothing a hand edit left behind can block a scope for good.

Order (DESIGN section 15, OPC 40001-3 "higher numbers have higher priority"): highest Priority,
then earliest StartTime (a job without one counts as earliest), then arrival. A job is never let
start before its StartTime. A job that is due but needs equipment a running job holds reserves
that equipment: jobs after it in the queue may not take it, so a waiting higher-priority job is
never starved by lower ones; jobs after it on other equipment start when capacity allows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.cloudevents import format_time
from gateway.jobstates import JobState, TopState
from gateway.recipes import QueuedJob, ScopeQueue
from gateway.store import Store
from gateway_jobs.model import JobAcceptance, JobResponse, Parameter, from_json

# States in which a job may hold a slot and its equipment (admitted: from being let start until
# it ends; paused and held jobs keep theirs, their part is still on the equipment).
_LAST = 2**62  # arrival of an entry read between its two writes: last

HOLDING = (TopState.ALLOWED_TO_START, TopState.RUNNING, TopState.INTERRUPTED)

# KEYS: waiting, arrival, admitted, seq. ARGV: job, entry. Queues the job unless already let
# start (an Update of an admitted job changes nothing here); keeps its arrival number.
ENQUEUE = """
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[1])
end
return 1
"""

# KEYS: waiting, arrival, admitted, online, state:Running, state:Interrupted, state:AllowedToStart,
# config:jobacceptance, blocked. ARGV: now (Unix s), capacity (0: unlimited) unless jobacceptance
# sets MaxRunningJobOrders, verify ('1': check every admitted job's state; the periodic pass does, a
# dispatch after a change need not, since the change released what it had to in its own
# transaction), view ('1': also return the queue as the pass leaves it, what ``read_queue``
# reads, so whoever shows the queue needs no read of its own).
# Returns {admitted jobs, next StartTime not reached yet ('' when none), view or false, unqueued},
# the view being {waiting (HGETALL), arrival (ZRANGE WITHSCORES), admitted (HGETALL), online,
# jobacceptance, blocked (HGETALL)}, each as those commands answer; unqueued (verify only): the
# jobs in AllowedToStart neither waiting nor admitted (stored by a version without the queue:
# the caller queues them, ``JobManager.adopt``).
DISPATCH = """
local function view()
  if ARGV[4] ~= '1' then return nil end
  return {redis.call('HGETALL', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'),
          redis.call('HGETALL', KEYS[3]), redis.call('GET', KEYS[4]),
          redis.call('GET', KEYS[8]), redis.call('HGETALL', KEYS[9])}
end
local now, capacity, verify = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local function unqueued()
  local found = {}
  if not verify then return found end
  for _, job in ipairs(redis.call('SMEMBERS', KEYS[7])) do
    if redis.call('HEXISTS', KEYS[1], job) == 0 and redis.call('HEXISTS', KEYS[3], job) == 0 then
      found[#found + 1] = job
    end
  end
  return found
end
local acceptance = redis.call('GET', KEYS[8])
if acceptance then
  local ok, doc = pcall(cjson.decode, acceptance)
  if ok and type(doc) == 'table' and type(doc.MaxRunningJobOrders) == 'number' then
    capacity = doc.MaxRunningJobOrders
  end
end
local function in_state(job, first, last)
  for i = first, last do
    if redis.call('SISMEMBER', KEYS[i], job) == 1 then return true end
  end
  return false
end
local held, running = {}, 0
-- Equipment an unsafe failure left blocked is held by nobody and let go to nobody.
for _, id in ipairs(redis.call('HKEYS', KEYS[9])) do held[id] = true end
local admitted = redis.call('HGETALL', KEYS[3])
for i = 1, #admitted, 2 do
  local job = admitted[i]
  if not verify or in_state(job, 5, 7) then
    running = running + 1
    for _, id in ipairs(cjson.decode(admitted[i + 1]).e or {}) do held[id] = true end
  else
    redis.call('HDEL', KEYS[3], job)
  end
end
local online = redis.call('GET', KEYS[4])
if online then
  local ok, doc = pcall(cjson.decode, online)
  if ok and type(doc) == 'table' and doc.Online == false then
    return {{}, '', view() or false, unqueued()}
  end
end
local waiting, queue = redis.call('HGETALL', KEYS[1]), {}
for i = 1, #waiting, 2 do
  local job = waiting[i]
  local arrival = redis.call('ZSCORE', KEYS[2], job)
  if arrival and (not verify or in_state(job, 7, 7)) then
    local entry = cjson.decode(waiting[i + 1])
    queue[#queue + 1] = {job = job, raw = waiting[i + 1], p = entry.p or 0,
                         t = tonumber(entry.t) or 0, n = tonumber(arrival), e = entry.e or {}}
  else
    redis.call('HDEL', KEYS[1], job)
    redis.call('ZREM', KEYS[2], job)
  end
end
table.sort(queue, function(a, b)
  if a.p ~= b.p then return a.p > b.p end
  if a.t ~= b.t then return a.t < b.t end
  if a.n ~= b.n then return a.n < b.n end
  return a.job < b.job
end)
local started, due = {}, nil
for _, entry in ipairs(queue) do
  if capacity > 0 and running >= capacity then break end
  if entry.t > now then
    if due == nil or entry.t < due then due = entry.t end
  else
    local free = true
    for _, id in ipairs(entry.e) do if held[id] then free = false end end
    for _, id in ipairs(entry.e) do held[id] = true end
    if free then
      redis.call('HDEL', KEYS[1], entry.job)
      redis.call('ZREM', KEYS[2], entry.job)
      redis.call('HSET', KEYS[3], entry.job, entry.raw)
      running = running + 1
      started[#started + 1] = entry.job
    end
  end
end
return {started, due and tostring(due) or '', view() or false, unqueued()}
"""


# KEYS: waiting, arrival, admitted, online, config:jobacceptance, blocked. What ``read_queue``
# reads, in one command: {waiting, arrivals with scores, admitted, online, acceptance, blocked}.
READ = """
return {redis.call('HGETALL', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'),
        redis.call('HGETALL', KEYS[3]), redis.call('GET', KEYS[4]), redis.call('GET', KEYS[5]),
        redis.call('HGETALL', KEYS[6])}
"""


@dataclass(frozen=True)
class QueueEntry:
    """A job in AllowedToStart not let start yet, as the queue orders it."""

    job_order_id: str
    priority: int
    start_time: float | None  # Unix time, None: none given
    equipment: tuple[str, ...]
    arrival: int
    position: int = 0  # 1-based, in the order the dispatcher considers them

    def sort_key(self) -> tuple[int, float, int, str]:
        return (-self.priority, self.start_time or 0.0, self.arrival, self.job_order_id)


@dataclass(frozen=True)
class Blocked:
    """Equipment an unsafe failure left blocked until someone acknowledges it."""

    job_order_id: str
    reason: str
    since: float  # Unix time

    def json(self) -> str:
        return json.dumps({"job": self.job_order_id, "reason": self.reason, "since": self.since})

    @staticmethod
    def of(text: str | bytes) -> Blocked:
        data = json.loads(text)
        return Blocked(str(data["job"]), str(data["reason"]), float(data["since"]))


@dataclass(frozen=True)
class QueueView:
    """A scope's queue as it is now (for the MES, the UI, the demo, metrics)."""

    online: bool
    reason: str | None  # why offline
    capacity: int  # 0: unlimited
    admitted: Mapping[str, tuple[str, ...]]  # job -> equipment it holds
    waiting: Sequence[QueueEntry]  # in order, position 1 first
    blocked: Mapping[str, Blocked] = dataclasses.field(default_factory=dict)  # by equipment

    def position(self, job_order_id: str) -> int | None:
        return next((e.position for e in self.waiting if e.job_order_id == job_order_id), None)

    def public(self) -> ScopeQueue:
        """As ``gateway.recipes.JobControl.queue`` gives it."""
        return ScopeQueue(
            online=self.online,
            reason=self.reason,
            capacity=self.capacity,
            running=dict(self.admitted),
            waiting=[
                QueuedJob(
                    job_order_id=entry.job_order_id,
                    position=entry.position,
                    priority=entry.priority,
                    start_time=None if entry.start_time is None else rfc3339(entry.start_time),
                    equipment=entry.equipment,
                    blocked=[item for item in entry.equipment if item in self.blocked],
                )
                for entry in self.waiting
            ],
            blocked={equipment: item.reason for equipment, item in self.blocked.items()},
        )


class QueueKeys:
    def __init__(self, store: Store) -> None:
        self.store = store

    def key(self, scope: str, name: str) -> str:
        return self.store.keys.scoped(scope, "queue", name)

    def waiting(self, scope: str) -> str:
        return self.key(scope, "waiting")

    def arrival(self, scope: str) -> str:
        return self.key(scope, "arrival")

    def admitted(self, scope: str) -> str:
        return self.key(scope, "admitted")

    def seq(self, scope: str) -> str:
        return self.key(scope, "seq")

    def blocked(self, scope: str) -> str:
        return self.key(scope, "blocked")

    def online(self, scope: str) -> str:
        return self.store.keys.scoped(scope, "config", "online")

    def acceptance(self, scope: str) -> str:
        # ``config.jobacceptance`` (``StationConfig``): MaxRunningJobOrders overrides the
        # ``[jobs]`` setting; read with the queue, in the same round trip or script.
        return self.store.keys.scoped(scope, "config", "jobacceptance")

    def state(self, scope: str, top: TopState) -> str:
        # The repository's state index (``JobRepository.state_key``), named here too so the
        # dispatch script can pass it in KEYS.
        return self.store.keys.scoped(scope, "jobs", "state", top.value)


def rfc3339(seconds: float) -> str:
    return format_time(datetime.fromtimestamp(seconds, UTC))


def start_seconds(start_time: str | None) -> float | None:
    """A job order's StartTime as Unix time (a time without zone counts as UTC)."""
    if not start_time:
        return None
    moment = datetime.fromisoformat(start_time.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def entry_json(priority: int, start_time: str | None, equipment: Collection[str]) -> str:
    entry: dict[str, Any] = {"p": priority, "e": sorted(set(equipment))}
    start = start_seconds(start_time)
    if start is not None:
        entry["t"] = start
    return json.dumps(entry, separators=(",", ":"))


def entry_equipment(text: str | bytes) -> tuple[str, ...]:
    """The equipment a queue entry (``entry_json``) names."""
    return tuple(json.loads(text).get("e") or ())


def queue_change(
    pipeline: Any,
    keys: QueueKeys,
    scope: str,
    job_order_id: str,
    before: JobState | None,
    after: JobState,
    entry: Callable[[], str],
) -> None:
    """Queue, update, dequeue or release ``job_order_id`` as its state goes ``before`` ->
    ``after`` (``None``: a new job), in the caller's transaction."""
    was = TopState.INITIAL if before is None else before.top
    now = after.top
    if now is TopState.ALLOWED_TO_START:
        # Entering, or an Update while queued (new priority, StartTime or equipment). EVAL, not
        # EVALSHA: inside MULTI a NOSCRIPT (a restarted or failed-over Redis) would fail this
        # command alone while the state change around it commits; the body is 300 bytes.
        pipeline.eval(
            ENQUEUE,
            4,
            keys.waiting(scope),
            keys.arrival(scope),
            keys.admitted(scope),
            keys.seq(scope),
            job_order_id,
            entry(),
        )
    elif was is TopState.ALLOWED_TO_START:
        pipeline.hdel(keys.waiting(scope), job_order_id)
        pipeline.zrem(keys.arrival(scope), job_order_id)
    if now not in HOLDING and was in HOLDING:
        pipeline.hdel(keys.admitted(scope), job_order_id)


async def read_queue(keys: QueueKeys, scope: str, capacity: int) -> QueueView:
    """The scope's queue, ordered as the dispatcher considers it (one script call);
    ``capacity``: the ``[jobs]`` setting, unless the scope's jobacceptance overrides it."""
    script = keys.store.client.register_script(READ)
    reply = await script(
        keys=[
            keys.waiting(scope),
            keys.arrival(scope),
            keys.admitted(scope),
            keys.online(scope),
            keys.acceptance(scope),
            keys.blocked(scope),
        ]
    )
    return scripted_view(reply, capacity)


def scripted_view(reply: Sequence[Any], capacity: int) -> QueueView:
    """The view ``DISPATCH`` returns (its replies as Lua gives them: flat arrays)."""
    waiting, arrivals, admitted, online, acceptance, blocked = reply
    pairs = list(zip(arrivals[::2], arrivals[1::2], strict=True))
    return queue_view(
        _pairs(waiting),
        [(job, float(score)) for job, score in pairs],
        _pairs(admitted),
        online,
        acceptance,
        _pairs(blocked),
        capacity,
    )


def _pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def queue_view(
    waiting: Mapping[Any, Any],
    arrivals: Sequence[tuple[Any, float]],
    admitted: Mapping[Any, Any],
    online: str | None,
    acceptance: str | None,
    blocked: Mapping[Any, Any],
    capacity: int,
) -> QueueView:
    """The view of the queue's keys as read (``read_queue``, ``scripted_view``)."""
    if acceptance is not None:
        override = from_json(json.loads(acceptance), JobAcceptance).max_running_job_orders
        capacity = capacity if override is None else override
    arrival = {str(job): int(float(score)) for job, score in arrivals}
    entries = []
    for job, text in waiting.items():
        entry = json.loads(text)
        start = entry.get("t")
        entries.append(
            QueueEntry(
                job_order_id=str(job),
                priority=int(entry.get("p", 0)),
                start_time=float(start) if start is not None else None,
                equipment=tuple(entry.get("e") or ()),
                arrival=arrival.get(str(job), _LAST),
            )
        )
    entries.sort(key=QueueEntry.sort_key)
    ordered = [
        QueueEntry(e.job_order_id, e.priority, e.start_time, e.equipment, e.arrival, position)
        for position, e in enumerate(entries, start=1)
    ]
    offline = _offline(online)
    return QueueView(
        online=offline is None,
        reason=offline or None,
        capacity=capacity,
        admitted={str(job): entry_equipment(text) for job, text in admitted.items()},
        waiting=ordered,
        blocked={str(equipment): Blocked.of(text) for equipment, text in blocked.items()},
    )


def _offline(document: str | None) -> str | None:
    """``None`` when online, else the reason given (``""`` when none)."""
    if document is None:
        return None
    try:
        data = json.loads(document)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("Online") is False:
        reason = data.get("Reason")
        return reason if isinstance(reason, str) else ""
    return None


QUEUE_POSITION_ID = "QueuePosition"  # Job Response entry of a queued job: 1 starts next


def with_position(response: JobResponse, position: int) -> JobResponse:
    """``response`` with its ``QueuePosition`` (read when asked for, never stored: it changes
    as other jobs move)."""
    entry = Parameter(id=QUEUE_POSITION_ID, value=position)
    data = [item for item in response.job_response_data or [] if item.id != QUEUE_POSITION_ID]
    return dataclasses.replace(response, job_response_data=[*data, entry])
