"""Running charts on several instances at once, sharing nothing but Redis.

Per scope (all keys carry the scope's hash tag):

- ``sfc:work`` stream, consumer group ``sfc-engine``: every stimulus for a job (start, reply,
  event, timer, MES command, send, report) is an entry; XREADGROUP hands each to one instance,
  XAUTOCLAIM hands the entries of a dead instance to a live one.
- ``sfc:exec:<job>``: the execution state (``gateway_sfc.state``), changed only by the CAS
  script below, which also writes the follow-up entries and timers in the same step.
- ``sfc:recipe:<job>``: the recipe and parameters the job started with (a snapshot, so a
  Work Master changed meanwhile does not change a running job).
- ``sfc:timers`` sorted set: durable timers by due time; any instance moves due ones to the
  stream atomically (so each fires once) — they survive every restart.
- ``sfc:waiting`` sorted set: jobs with a ``pull_event`` waiting, oldest first, where an
  incoming equipment event looks for its taker; ``sfc:unclaimed``: recent events nobody waited
  for yet (an event may overtake the state change that starts the wait).
- ``sfc:active`` set: jobs not ended, for the recovery scan at start.

Globally: ``sfc:scopes`` (every scope that ran a job, for discovery) and ``sfc:job-scopes``
(job id -> scope, for replies that do not say their scope).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import TaskStatus
from redis.exceptions import ResponseError

from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.errors import GatewayError, ValidationError
from gateway.logs import log_context
from gateway.recipes import JobCommand, JobOutcome, ProcessValue, RecipeJob
from gateway_sfc.chart import Chart
from gateway_sfc.engine import Effects, Executor, Timer
from gateway_sfc.metrics import EngineMetrics
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.settings import SfcSettings
from gateway_sfc.state import Execution, Phase, Status, dump_execution, load_execution
from gateway_sfc.validation import load_chart

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.phases import InterpreterPhase
    from gateway.store import Store

log = logging.getLogger(__name__)

GROUP = "sfc-engine"
StreamEntry = tuple[str, dict[str, str] | None]  # what the text-decoding client returns

# Compare-and-swap of one job's execution state, with everything that must happen with it.
# KEYS: exec doc, work stream, timers, waiting, active. ARGV[1]: the version the caller read
# (-1: create, the doc must not exist); ARGV[2]: the new doc; ARGV[3]: JSON of the follow-ups.
# Values travel as arguments and JSON decoded by cjson: nothing is spliced into the script.
COMMIT = """
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if expected < 0 then
  if current then return 0 end
elseif not current or tonumber(cjson.decode(current)['version']) ~= expected then
  return 0
end
local ops = cjson.decode(ARGV[3])
if ops['ttl'] > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ops['ttl'])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
for _, entry in ipairs(ops['work']) do
  redis.call('XADD', KEYS[2], '*', unpack(entry))
end
for _, timer in ipairs(ops['timers']) do
  redis.call('ZADD', KEYS[3], timer[1], timer[2])
end
if ops['waiting'] then
  redis.call('ZADD', KEYS[4], 'NX', ops['now'], ops['job'])
else
  redis.call('ZREM', KEYS[4], ops['job'])
end
if ops['active'] then
  redis.call('SADD', KEYS[5], ops['job'])
else
  redis.call('SREM', KEYS[5], ops['job'])
end
return 1
"""

# Move due timers to the work stream; ZREM decides which instance moves each one.
FIRE_TIMERS = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for _, member in ipairs(due) do
  if redis.call('ZREM', KEYS[1], member) == 1 then
    local timer = cjson.decode(member)
    redis.call('XADD', KEYS[2], '*', 'kind', 'timer', 'job', timer['job'], 'timer', member)
    moved = moved + 1
  end
end
return moved
"""


@dataclass(frozen=True)
class Snapshot:
    """What a job runs: its compiled chart and parameters (fixed when it started)."""

    chart: Chart
    parameters: Mapping[str, Any]
    recipe: Any


class Coordinator:
    """The SFC engine's Redis side: work stream, CAS, timers, recovery, equipment sink."""

    def __init__(self, settings: SfcSettings, gateway: InterpreterPhase) -> None:
        self.settings = settings
        self.gateway = gateway
        self.consumer = gateway.instance_id
        self.scopes: set[str] = set()
        self._snapshots: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()
        self._commit: Any = None
        self._fire_timers: Any = None
        self._slots: anyio.Semaphore | None = None
        self._scope_added: anyio.Event | None = None
        self.metrics = EngineMetrics(gateway.metrics)
        self.metrics.sample_streams(gateway.metrics, self._group_info)

    # -- keys -------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        store = self.gateway.store
        if store is None:
            raise GatewayError("the SFC engine needs a store (is the redis plugin blocked?)")
        return store

    @property
    def client(self) -> Redis:
        return self.store.client

    def _key(self, scope: str, *parts: str) -> str:
        return self.store.keys.scoped(scope, "sfc", *parts)

    def _global(self, name: str) -> str:
        return self.store.keys.global_key("sfc", name)

    def _stream(self, scope: str) -> str:
        return self._key(scope, "work")

    async def _group_info(self) -> dict[str, dict[str, Any]]:
        """The consumer group's figures per scope (pending, lag) for the metrics."""
        info: dict[str, dict[str, Any]] = {}
        for scope in list(self.scopes):
            for group in await self.client.xinfo_groups(self._stream(scope)):
                if group.get("name") == GROUP:
                    info[scope] = group
        return info

    # -- entry points (interpreter and equipment sink) --------------------------------------

    async def enqueue(self, scope: str, fields: Mapping[str, str]) -> None:
        """Add a work entry for ``scope``, making sure the scope is known and has its group."""
        if scope not in self.scopes:
            await self._adopt_scope(scope, announce=True)
        await self.client.xadd(self._stream(scope), dict(fields))  # type: ignore[arg-type]

    async def start_job(self, job: RecipeJob) -> None:
        await self._enqueue_start(job.scope, job.job_order_id)

    async def _enqueue_start(self, scope: str, job: str) -> None:
        await self.client.hset(self._global("job-scopes"), job, scope)
        await self.enqueue(scope, {"kind": "start", "job": job})

    async def command_job(self, job: RecipeJob, command: JobCommand) -> None:
        await self.command_job_id(job.scope, job.job_order_id, command)

    async def reply(self, reply: EquipmentReply) -> None:
        try:
            job, action, attempt = reply.correlation_id.rsplit(":", 2)
            int(attempt)
        except ValueError:
            log.warning("reply with foreign correlation id %r ignored", reply.correlation_id)
            return
        scope = reply.scope or await self._job_scope(job)
        if not scope:
            log.warning("reply %s for unknown job %s ignored", reply.correlation_id, job)
            return
        fields = {"kind": "reply", "job": job, "action": action, "attempt": attempt}
        fields["data"] = json.dumps(reply.data, default=str)
        if reply.error is not None:
            fields["error"] = reply.error
        await self.enqueue(str(scope), fields)

    async def event(self, event: EquipmentEvent) -> None:
        scope = event.scope
        if scope is None and event.job_order_id:
            scope = await self._job_scope(event.job_order_id)
        if scope is None:
            scope = await self._scope_waiting_for(event)
        if scope is None:
            log.info("event %s (%s) arrived where no job runs; dropped", event.id, event.type)
            return
        await self.enqueue(str(scope), {"kind": "event", "event": _event_json(event)})

    async def _job_scope(self, job: str) -> str | None:
        scope = await self.client.hget(self._global("job-scopes"), job)
        return str(scope) if scope is not None else None

    async def _members(self, key: str) -> set[str]:
        return {str(member) for member in await self.client.smembers(key)}

    async def _scope_waiting_for(self, event: EquipmentEvent) -> str | None:
        for scope in sorted(self.scopes):
            if await self.client.zcard(self._key(scope, "waiting")):
                return scope
        return None

    # -- the service ------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        self._commit = self.client.register_script(COMMIT)
        self._fire_timers = self.client.register_script(FIRE_TIMERS)
        self._slots = anyio.Semaphore(self.settings.max_concurrent_items)
        self._scope_added = anyio.Event()
        for scope in await self._members(self._global("scopes")):
            await self._adopt_scope(scope, announce=False)
        await self._recovery_scan()
        await self._reconcile()
        task_status.started()
        # Leaving the block stops the loops first, then lets the entries in hand finish
        # (unfinished ones stay pending in the group and another instance claims them).
        async with anyio.create_task_group() as handlers, anyio.create_task_group() as loops:
            loops.start_soon(self._read_loop, handlers)
            loops.start_soon(self._every, self.settings.timer_poll_seconds, self._fire_due_timers)
            loops.start_soon(
                self._every, self.settings.claim_idle_seconds / 2, self._claim_orphans, handlers
            )
            loops.start_soon(self._every, self.settings.scope_poll_seconds, self._discover_scopes)
            loops.start_soon(self._every, self.settings.reconcile_seconds, self._reconcile)
            await self.gateway.stopping.wait()
            loops.cancel_scope.cancel()

    async def _every(self, seconds: float, work: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``work`` every ``seconds`` (first after one interval), surviving its failures."""
        while True:
            await anyio.sleep(seconds)
            try:
                await work(*args)
            except Exception:
                log.exception("SFC engine background task %s failed; retrying", work.__name__)

    async def _adopt_scope(self, scope: str, *, announce: bool) -> None:
        try:
            # Id 0: entries written before the group existed are delivered too.
            await self.client.xgroup_create(self._stream(scope), GROUP, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        if announce:
            await self.client.sadd(self._global("scopes"), scope)
        self.scopes.add(scope)
        if self._scope_added is not None:  # wake a read loop waiting for its first scope
            self._scope_added.set()

    async def _discover_scopes(self) -> None:
        for scope in await self._members(self._global("scopes")):
            if scope not in self.scopes:
                log.info("SFC engine: new scope %s", scope)
                await self._adopt_scope(scope, announce=False)

    async def _recovery_scan(self) -> None:
        """Re-examine every unfinished job once: re-send what waits, advance what can."""
        for scope in self.scopes:
            for job in await self._members(self._key(scope, "active")):
                await self.client.xadd(self._stream(scope), {"kind": "resume", "job": job})

    async def _reconcile(self) -> None:
        """Catch up with job management where a crash lost a hand-off.

        Job management changes a job's state first and tells the interpreter after; an
        instance dying in between leaves a job in AllowedToStart that nobody runs, or a chart
        still running for a job the MES paused, stopped or aborted. Both are repaired here.
        """
        control = self.gateway.job_control
        for scope in self.scopes | await self.store.known_scopes():
            for job in await control.startable(scope):
                if await self.client.exists(self._key(scope, "exec", job)):
                    continue
                recipe_job = await control.job(scope, job)
                if recipe_job is not None and recipe_job.dataschema == DATASCHEMA:
                    log.info("job %s/%s waits in AllowedToStart: starting it", scope, job)
                    await self._enqueue_start(scope, job)
            for job in await self._members(self._key(scope, "active")):
                text = await self.client.get(self._key(scope, "exec", job))
                if text is None:
                    continue
                status = load_execution(text).status
                command = lost_command(await control.state(scope, job), status)
                if command is not None:
                    log.info("job %s/%s: the chart missed %s; applying it", scope, job, command)
                    await self.command_job_id(scope, job, command)

    async def command_job_id(self, scope: str, job: str, command: JobCommand) -> None:
        await self.enqueue(scope, {"kind": "command", "job": job, "command": command.value})

    async def _read_loop(self, handlers: anyio.abc.TaskGroup) -> None:
        await self._read_backlog(handlers)
        while True:
            if not self.scopes:
                assert self._scope_added is not None
                with anyio.move_on_after(self.settings.scope_poll_seconds):
                    await self._scope_added.wait()
                continue
            streams = {self._stream(scope): ">" for scope in self.scopes}
            # A short block: a scope adopted meanwhile joins the next read.
            for stream, batch in await self._read_group(streams, block_ms=100):
                for entry_id, fields in batch:
                    if fields:
                        await self._take(handlers, stream, entry_id, fields)

    async def _read_backlog(self, handlers: anyio.abc.TaskGroup) -> None:
        """Entries handed to this consumer name before a restart and never acknowledged."""
        for scope in list(self.scopes):
            stream, after = self._stream(scope), "0"
            while batches := await self._read_group({stream: after}):
                batch = batches[0][1]
                if not batch:
                    break
                for entry_id, fields in batch:
                    after = entry_id
                    if fields:
                        await self._take(handlers, stream, entry_id, fields)

    async def _read_group(
        self, streams: dict[str, str], block_ms: int | None = None
    ) -> list[tuple[str, list[StreamEntry]]]:
        reply = await self.client.xreadgroup(
            GROUP,
            self.consumer,
            streams,  # type: ignore[arg-type]  # redis-py types stream ids too narrowly
            count=100,
            block=block_ms,
        )
        return cast(list[tuple[str, list[StreamEntry]]], reply or [])

    async def _claim_orphans(self, handlers: anyio.abc.TaskGroup) -> None:
        idle_ms = int(self.settings.claim_idle_seconds * 1000)
        for scope in list(self.scopes):
            stream = self._stream(scope)
            reply = await self.client.xautoclaim(
                stream, GROUP, self.consumer, idle_ms, start_id="0-0", count=100
            )
            entries = cast(list[StreamEntry], reply[1])
            for entry_id, fields in entries:
                if fields:
                    log.info("SFC engine: claimed orphaned entry %s of %s", entry_id, scope)
                    await self._take(handlers, stream, entry_id, fields)

    async def _take(
        self, handlers: anyio.abc.TaskGroup, stream: str, entry_id: str, fields: dict[str, str]
    ) -> None:
        assert self._slots is not None
        await self._slots.acquire()
        handlers.start_soon(self._handle_entry, stream, entry_id, fields)

    async def _handle_entry(self, stream: str, entry_id: str, fields: dict[str, str]) -> None:
        assert self._slots is not None
        scope = _scope_of_stream(stream)
        job = fields.get("job")
        correlation = (
            f"{job}:{fields['action']}:{fields['attempt']}" if "attempt" in fields else None
        )
        try:
            with log_context(scope=scope, job=job, correlationid=correlation):
                await self.handle(scope, fields)
        except (ValidationError, KeyError, ValueError) as error:
            # The entry itself is wrong: retrying cannot help, so say so and drop it.
            log.error("SFC work entry %s of %s dropped: %s (%s)", entry_id, scope, error, fields)
        except Exception:
            log.exception("SFC work entry %s of %s failed; it will be retried", entry_id, scope)
            return
        finally:
            self._slots.release()
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xack(stream, GROUP, entry_id)
            pipe.xdel(stream, entry_id)
            await pipe.execute()

    async def _fire_due_timers(self) -> None:
        now = time.time()
        for scope in list(self.scopes):
            await self._fire_timers(
                keys=[self._key(scope, "timers"), self._stream(scope)], args=[now, 100]
            )

    # -- handling one work entry ------------------------------------------------------------

    async def handle(self, scope: str, fields: Mapping[str, str]) -> None:
        kind = fields["kind"]
        if kind == "event":
            await self._route_event(scope, json.loads(fields["event"]))
            return
        job = fields["job"]
        if kind == "start":
            await self._start(scope, job)
        elif kind == "send":
            await self._send(scope, job, fields["action"], int(fields["attempt"]))
        elif kind == "report":
            await self._report(scope, job)
        elif kind == "reply":
            data = json.loads(fields.get("data") or "null")
            attempt = int(fields["attempt"])
            await self._mutate(
                scope,
                job,
                lambda ex, execution, now: ex.on_reply(
                    execution, fields["action"], attempt, data, fields.get("error"), now
                ),
            )
        elif kind == "timer":
            timer = _timer_from_json(fields["timer"])
            offline = await self._offline_reason(scope, job, timer)
            await self._mutate(
                scope, job, lambda ex, execution, now: ex.on_timer(execution, timer, now, offline)
            )
        elif kind == "command":
            command = JobCommand(fields["command"])
            await self._mutate(
                scope, job, lambda ex, execution, now: ex.on_command(execution, command, now)
            )
        elif kind == "resume":
            await self._mutate(scope, job, lambda ex, execution, now: ex.on_resume(execution, now))
        else:
            raise ValueError(f"unknown work entry kind {kind!r}")

    async def _start(self, scope: str, job: str) -> None:
        control = self.gateway.job_control
        recipe_job = await control.job(scope, job)
        if recipe_job is None:
            log.warning("job %s/%s to start no longer exists", scope, job)
            return
        if not await control.run(scope, job):
            state = await control.state(scope, job)
            if state != "Running":  # revoked, aborted or cleared meanwhile
                log.info("job %s/%s not started: it is %s", scope, job, state)
                return
        try:
            chart = load_chart(recipe_job.recipe)
        except ValidationError as error:
            await control.abort(scope, job, JobOutcome(error=f"invalid recipe: {error}"))
            return
        snapshot = {"recipe": recipe_job.recipe, "parameters": recipe_job.parameters()}
        await self.client.set(self._key(scope, "recipe", job), json.dumps(snapshot), nx=True)
        executor = self._executor(chart, snapshot["parameters"])
        execution, effects = executor.start(scope, job, time.time())
        if await self._write(execution, -1, effects):
            log.info("job %s/%s: chart started at %s", scope, job, chart.initial)
            self._announce_steps(execution, {}, time.time())
            if _waiting(execution):
                await self._claim_unclaimed_events(scope, job)

    async def _mutate(
        self, scope: str, job: str, apply: Callable[[Executor, Execution, float], Effects]
    ) -> None:
        """Read, apply, compare-and-swap; on a conflict, read again and re-apply."""
        for _ in range(self.settings.max_cas_retries):
            text = await self.client.get(self._key(scope, "exec", job))
            if text is None:
                return  # never started, or ended long ago
            execution = load_execution(text)
            if execution.status is Status.ENDED:
                return
            snapshot = await self._snapshot(scope, job)
            executor = self._executor(snapshot.chart, snapshot.parameters)
            was_waiting = _waiting(execution)
            was_active = {name: node.entered_at for name, node in execution.nodes.items()}
            now = time.time()
            effects = apply(executor, execution, now)
            if not (effects.changed or effects.sends or effects.timers or effects.report):
                return
            if await self._write(execution, execution.version, effects):
                self._announce_steps(execution, was_active, now)
                if effects.reply is not None:
                    seconds, failed = effects.reply
                    self.metrics.replies.labels("error" if failed else "ok").observe(seconds)
                if _waiting(execution) - was_waiting:
                    await self._claim_unclaimed_events(scope, job)
                return
        raise GatewayError(
            f"job {scope}/{job}: state kept changing under {self.settings.max_cas_retries} tries"
        )

    def _announce_steps(
        self, execution: Execution, was_active: dict[str, float], now: float
    ) -> None:
        """Tell observers which steps and branches became active or inactive (after a write)."""
        hook = self.gateway.plugins.hook.gateway_step_changed
        for node in sorted(was_active.keys() - execution.nodes.keys()):
            self.metrics.steps.labels(node).observe(now - was_active[node])
            hook(scope=execution.scope, job_order_id=execution.job, step=node, active=False)
        for node in sorted(execution.nodes.keys() - was_active.keys()):
            hook(scope=execution.scope, job_order_id=execution.job, step=node, active=True)

    async def _write(self, execution: Execution, expected: int, effects: Effects) -> bool:
        scope, job = execution.scope, execution.job
        work: list[list[str]] = []
        for action in effects.sends:
            attempt = str(execution.actions[action].attempt)
            work.append(["kind", "send", "job", job, "action", action, "attempt", attempt])
        if effects.report is not None:
            work.append(["kind", "report", "job", job])
        ended = execution.status is Status.ENDED
        ops = {
            "work": work,
            "timers": [[timer.due, _timer_json(job, timer)] for timer in effects.timers],
            "waiting": bool(_waiting(execution)) and not ended,
            "active": not ended,
            "job": job,
            "now": time.time(),
            "ttl": self.settings.ended_ttl_seconds if ended else 0,
        }
        execution.version = expected + 1 if expected >= 0 else 0
        keys = [
            self._key(scope, "exec", job),
            self._stream(scope),
            self._key(scope, "timers"),
            self._key(scope, "waiting"),
            self._key(scope, "active"),
        ]
        written = await self._commit(
            keys=keys, args=[expected, dump_execution(execution), json.dumps(ops)]
        )
        return bool(written)

    def _executor(self, chart: Chart, parameters: Mapping[str, Any]) -> Executor:
        settings = self.settings
        return Executor(
            chart, parameters, settings.recheck_seconds, settings.offline_timeout_seconds
        )

    async def _offline_reason(self, scope: str, job: str, timer: Timer) -> str | None:
        """Why the equipment of a timed-out action is offline (``None``: online or unknown)."""
        if timer.kind not in ("timeout", "liveness"):
            return None
        snapshot = await self._snapshot(scope, job)
        action = next((a for a in snapshot.chart.recipe.actions if a.name == timer.action), None)
        if action is None or not action.equipment:
            return None
        return await self.gateway.equipment.offline_reason(action.equipment)

    async def _snapshot(self, scope: str, job: str) -> Snapshot:
        key = (scope, job)
        if key in self._snapshots:
            self._snapshots.move_to_end(key)
            return self._snapshots[key]
        text = await self.client.get(self._key(scope, "recipe", job))
        if text is None:
            raise ValueError(f"job {scope}/{job} has an execution state but no recipe snapshot")
        data = json.loads(text)
        snapshot = Snapshot(load_chart(data["recipe"]), data["parameters"], data["recipe"])
        self._snapshots[key] = snapshot
        if len(self._snapshots) > self.settings.chart_cache_size:
            self._snapshots.popitem(last=False)
        return snapshot

    async def _send(self, scope: str, job: str, action_name: str, attempt: int) -> None:
        text = await self.client.get(self._key(scope, "exec", job))
        if text is None:
            return
        execution = load_execution(text)
        run = execution.actions.get(action_name)
        if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
            return  # cancelled or answered meanwhile
        snapshot = await self._snapshot(scope, job)
        action = next(a for a in snapshot.chart.recipe.actions if a.name == action_name)
        command = EquipmentCommand(
            correlation_id=f"{job}:{action_name}:{attempt}",
            type=action.type_id,
            equipment=action.equipment,
            scope=scope,
            job_order_id=job,
            action=action_name,
            parameters=action.parameters,
            job_parameters=snapshot.parameters,
            timeout_seconds=action.timeout_seconds,
        )
        try:
            await self.gateway.equipment.send(command)
            self.metrics.commands.labels(command.type).inc()
        except GatewayError as error:
            # No driver, or the driver could not deliver: this try failed.
            log.warning("job %s/%s: %s not delivered: %s", scope, job, action_name, error)
            await self._fail_try(scope, job, action_name, attempt, str(error))

    async def _fail_try(self, scope: str, job: str, action: str, attempt: int, error: str) -> None:
        await self._mutate(
            scope,
            job,
            lambda ex, execution, now: ex.on_reply(
                execution, action, attempt, None, error, now, delivered=False
            ),
        )

    async def _report(self, scope: str, job: str) -> None:
        """Tell job control how the chart ended (or that it holds), then close the state."""
        text = await self.client.get(self._key(scope, "exec", job))
        if text is None:
            return
        execution = load_execution(text)
        control = self.gateway.job_control
        if execution.status is Status.HELD:
            await control.hold(scope, job, execution.error or "an action failed")
            return
        if execution.status is not Status.FINISHING:
            return
        outcome = JobOutcome(
            results=[
                ProcessValue(id=name, value=value) for name, value in execution.results.items()
            ],
            error=execution.error,
            side_effects=execution.side_effects,
        )
        if execution.outcome == "completed":
            await control.complete(scope, job, outcome)
        elif execution.outcome == "aborted":
            await control.abort(scope, job, outcome)
        else:  # stopped or aborted by the MES: the job's state is already set
            await control.record_results(scope, job, outcome.results)
        await self._mutate(scope, job, _mark_ended)
        self.metrics.charts.labels(execution.outcome or "unknown").inc()
        log.info("job %s/%s: chart %s", scope, job, execution.outcome)

    async def _route_event(self, scope: str, event: dict[str, Any]) -> None:
        """Give an equipment event to the job that has waited longest for it."""
        for job in cast(list[str], await self.client.zrange(self._key(scope, "waiting"), 0, -1)):
            if await self._offer_event(scope, job, event):
                return
        await self._keep_unclaimed(scope, event)
        # A job may have started waiting after we looked and before the event was kept (its
        # own look at the kept events came too early): look once more from this side.
        for job in cast(list[str], await self.client.zrange(self._key(scope, "waiting"), 0, -1)):
            await self._claim_unclaimed_events(scope, job)

    async def _offer_event(self, scope: str, job: str, event: dict[str, Any]) -> bool:
        taken = False

        def apply(executor: Executor, execution: Execution, now: float) -> Effects:
            nonlocal taken
            action = _waiting_action_for(executor, execution, event)
            if action is None:
                return Effects()
            taken = True
            return executor.on_event(execution, action, event.get("data"), now)

        await self._mutate(scope, job, apply)
        return taken

    async def _keep_unclaimed(self, scope: str, event: dict[str, Any]) -> None:
        key = self._key(scope, "unclaimed")
        event = {**event, "received": time.time()}
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.lpush(key, json.dumps(event))
            pipe.ltrim(key, 0, self.settings.unclaimed_events_kept - 1)
            await pipe.execute()
        log.info(
            "event %s (%s) in %s: no job waits for it yet; kept %.0f s",
            event.get("id"),
            event.get("type"),
            scope,
            self.settings.unclaimed_event_seconds,
        )

    async def _claim_unclaimed_events(self, scope: str, job: str) -> None:
        """The job started waiting: take the events that arrived just before, if they match."""
        key = self._key(scope, "unclaimed")
        oldest_wanted = time.time() - self.settings.unclaimed_event_seconds
        snapshot = await self._snapshot(scope, job)
        executor = self._executor(snapshot.chart, snapshot.parameters)
        unclaimed = cast(list[str], await self.client.lrange(key, 0, -1))
        for text in reversed(unclaimed):  # oldest first
            event = json.loads(text)
            if event.get("received", 0) < oldest_wanted:
                continue
            state = await self.client.get(self._key(scope, "exec", job))
            if state is None:
                return
            execution = load_execution(state)
            if not _waiting(execution):
                return
            if _waiting_action_for(executor, execution, event) is None:
                continue
            taken = await self.client.lrem(key, 1, text)  # whoever removes it, owns it
            if taken and not await self._offer_event(scope, job, event):
                await self._keep_unclaimed(scope, event)


def lost_command(state: str | None, status: Status) -> JobCommand | None:
    """The MES command a chart in ``status`` missed, given its job's state (``None``: none).

    A chart that is finishing reports its own end, so the job's end state is then its own
    doing. A held chart is left alone: it may not have reported the hold yet.
    """
    if status not in (Status.RUNNING, Status.PAUSED):
        return None
    if state is None or state == "EndState" or state.startswith("Aborted"):
        return JobCommand.ABORT
    if state.startswith("Ended"):
        return JobCommand.STOP
    if state.startswith("Interrupted") and status is Status.RUNNING:
        return JobCommand.PAUSE
    if state == "Running" and status is Status.PAUSED:
        return JobCommand.RESUME
    return None


def _mark_ended(executor: Executor, execution: Execution, now: float) -> Effects:
    execution.status = Status.ENDED
    return Effects(changed=True)


def _waiting(execution: Execution) -> set[str]:
    return {run.name for run in execution.actions.values() if run.phase is Phase.WAITING}


def _waiting_action_for(
    executor: Executor, execution: Execution, event: Mapping[str, Any]
) -> str | None:
    """The waiting pull_event action this event completes, if any (type, equipment, job)."""
    if event.get("job_order_id") not in (None, execution.job):
        return None
    for run in execution.actions.values():
        if run.phase is not Phase.WAITING:
            continue
        action = next(a for a in executor.recipe.actions if a.name == run.name)
        if action.type_id != event.get("type"):
            continue
        if action.equipment is not None and event.get("equipment") not in (None, action.equipment):
            continue
        return run.name
    return None


def _event_json(event: EquipmentEvent) -> str:
    return json.dumps(
        {
            "type": event.type,
            "id": event.id,
            "equipment": event.equipment,
            "job_order_id": event.job_order_id,
            "data": event.data,
        },
        default=str,
    )


def _timer_json(job: str, timer: Timer) -> str:
    return json.dumps(
        {
            "job": job,
            "kind": timer.kind,
            "action": timer.action,
            "attempt": timer.attempt,
            "due": timer.due,
        },
        sort_keys=True,
    )


def _timer_from_json(text: str) -> Timer:
    data = json.loads(text)
    return Timer(float(data["due"]), str(data["kind"]), str(data["action"]), int(data["attempt"]))


def _scope_of_stream(stream: str) -> str:
    # "<prefix>:{<scope>}:sfc:work"
    return stream[stream.index("{") + 1 : stream.rindex("}")]
