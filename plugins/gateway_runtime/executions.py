"""Reading and compare-and-swapping one job's execution state, and telling observers.

The last state this instance committed for a job is kept in memory: a step applies to it
and commits with one script call, no read first. The compare-and-swap still guards every
write, so a state another instance changed meanwhile fails the swap, is read again and the
change re-applied; and a stimulus that changes nothing on a remembered state is checked again
on a fresh read before it is dropped (the memory may be behind, never ahead).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from json.encoder import encode_basestring_ascii as _json_text  # json.dumps's, in C
from typing import TYPE_CHECKING

import orjson

from gateway.errors import GatewayError
from gateway.formats import Effects, Execution, Executor, Phase, Status, Timer, TimerKind
from gateway_runtime.breakpoints import left_pause, reached, stop_before, watched
from gateway_runtime.context import EngineContext
from gateway_runtime.memory import JobMemory, Lru
from gateway_runtime.scripts import COMMIT
from gateway_runtime.snapshots import RecipeCache
from gateway_runtime.state import dump_action_run, dump_execution, load_execution, take_done

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

log = logging.getLogger(__name__)

Apply = Callable[[Executor, Execution, float], Effects]
WaitStarted = Callable[[str, str], Awaitable[None]]
Committed = Callable[[str, str, Sequence[tuple[str, int]]], Awaitable[None]]
ReportHere = Callable[[Execution], None]
Try = tuple[str, int]  # action name, attempt

# Timers of one try: at most one of these per (action, attempt), so each has a fixed name.
TRY_TIMERS = ("timeout", "liveness")
OUTSTANDING = (Phase.DISPATCHED, Phase.WAITING)


class Commit(IntEnum):
    """What the compare-and-swap script answered."""

    MARKS_CHANGED = -4  # create: the job's breakpoints are not the ones given: no write
    EARLIER_UNREAD = -3  # create: an earlier run's ended state the caller did not build on
    EARLIER_RUNNING = -2  # create: an earlier run of the job id has not ended yet: no write
    TAKEN_FIRST = -1  # the kept event the change applies was taken by another job: no write
    CONFLICT = 0  # the stored version is not the one read
    WRITTEN = 1


@dataclass(frozen=True)
class StartBookkeeping:
    """What a create checks and does for the job's start in the same script: ``earlier``: the
    run of the ended state the new one numbers its tries on ("" none); ``work_master``: whose
    breakpoints count too (the state is given ``Execution.breakpoints``, checked against the
    stored ones)."""

    earlier: str = ""
    work_master: str | None = None


class ExecutionStore:
    """The CAS on ``sfc:exec:<job>`` and everything committed with it (work, timers, sets)."""

    def __init__(self, context: EngineContext, recipes: RecipeCache, memory: JobMemory) -> None:
        self.context = context
        self.recipes = recipes
        self._commit: AsyncScript | None = None
        # The jobs in progress this instance committed a state of (``memory``: ended ones go).
        self._remembered: Lru[tuple[str, str], Execution] = memory.cache()
        # Called after a write that made the job wait for an equipment event (the event router
        # then offers it the events that came early).
        self.wait_started: WaitStarted | None = None
        # Called after every write that dispatched commands (scope, job, the tries to send).
        self.committed: Committed | None = None
        # While the engine runs: reports the end a write just committed, here (the execution as
        # written, which nobody else changes: it is not remembered). Without it, or for a hold,
        # the write adds a work entry for the report instead. A crash before the report leaves
        # the execution finishing, which reconciliation reports (``reconcile.report_lost``).
        self.report_here: ReportHere | None = None
        # Called after a write that set timers or sent commands: the earliest due time (a
        # timer's, or when a command unconfirmed is sent again), so it is looked at on time.
        self.due_at: Callable[[float], None] | None = None

    def start(self) -> None:
        """Called when the engine starts running: the store's client is new on every run."""
        self._commit = self.context.client.register_script(COMMIT)
        self._remembered.clear()

    async def read(self, scope: str, job: str) -> Execution | None:
        text = await self.context.client.get(self.context.keys.execution(scope, job))
        return None if text is None else load_execution(text)

    async def exists(self, scope: str, job: str) -> bool:
        return bool(await self.context.client.exists(self.context.keys.execution(scope, job)))

    async def still_going(self, execution: Execution) -> bool:
        """Whether the stored state of ``execution``'s run has not begun to end since it was
        read (neither finishing nor ended).

        For a look at an execution and then at its job's state, the state being newer: the
        MES's command the execution has not taken yet (missed, or on its way: applying it
        again changes nothing), or the end the execution itself committed meanwhile (it
        finished, then job management completed the job), which is no Stop it missed. The
        execution, read again, tells the second: an end comes before its job's.
        """
        now = await self.read(execution.scope, execution.job)
        return (
            now is not None
            and now.run == execution.run
            and now.status not in (Status.FINISHING, Status.ENDED)
        )

    async def create(
        self,
        execution: Execution,
        effects: Effects,
        snapshot: str,
        start: StartBookkeeping | None = None,
    ) -> Commit:
        """Write a new job's first state, with its recipe ``snapshot`` (``CONFLICT``: another
        instance started it first); ``start``: checked and done in the same script (``Commit``
        says what did not hold)."""
        now_waiting = bool(waiting(execution))
        note_reached(execution, {})
        commit = await self.write(
            execution,
            -1,
            effects,
            set(),
            waits_for_event=now_waiting,
            snapshot=snapshot,
            start=start,
        )
        if commit is not Commit.WRITTEN:
            return commit
        self.announce_steps(execution, {}, time.time())
        await self._after(execution, effects, started_waiting=now_waiting)
        self._remember(execution)
        return commit

    async def mutate(self, scope: str, job: str, apply: Apply, take: str | None = None) -> bool:
        """Apply, compare-and-swap; on a conflict, read again and re-apply. ``take``: the kept
        event (as kept) that the change applies, taken in the same script; ``False``: nothing
        was written (nothing to change, or the kept event was taken first)."""
        settings = self.context.settings
        key = (scope, job)
        for _ in range(settings.max_cas_retries):
            execution = self._remembered.pop(key)
            fresh = execution is None
            if execution is None:
                execution = await self.read(scope, job)
            if execution is None:
                return False  # never started, or ended long ago
            if execution.status is Status.ENDED:
                return False
            executor = await self.recipes.executor(scope, job, execution.run, execution.recipe)
            was_waiting, was_outstanding = in_flight(execution)
            was_active = {name: node.entered_at for name, node in execution.nodes.items()}
            was_status = execution.status
            now = time.time()
            before = watched(execution)
            effects = apply(executor, execution, now)
            stop = None if before is None else reached(execution, was_active)
            if before is not None and stop is not None:
                execution, effects = stop_before(executor, before, apply, stop, now)
            left_pause(execution)
            note_reached(execution, was_active)
            if not (effects.changed or effects.sends or effects.timers or effects.report):
                if fresh:
                    self._remember(execution)
                    return False
                continue  # the remembered state may be behind: look at the stored one
            now_waiting, now_outstanding = in_flight(execution)
            ended = was_outstanding - now_outstanding
            commit = await self.write(
                execution,
                execution.version,
                effects,
                ended,
                take,
                waits_for_event=bool(now_waiting),
                breakpoint=stop is not None,
            )
            if commit is Commit.TAKEN_FIRST:
                return False  # the remembered state was not changed: it is read again
            if commit is Commit.WRITTEN:
                # Observers first: sending waits for the broker, and meanwhile the reply to
                # what was sent may already be committed and announced by another task.
                self.announce_steps(execution, was_active, now)
                if (
                    execution.status is Status.COMPENSATING
                    and was_status is not Status.COMPENSATING
                ):
                    log.info(
                        "job %s/%s: rolling back (%s): %s",
                        scope,
                        job,
                        execution.error,
                        ", ".join(effects.sends) or "nothing to undo",
                    )
                if effects.reply is not None:
                    seconds, failed = effects.reply
                    self.context.metrics.replies.labels("error" if failed else "ok").observe(
                        seconds
                    )
                await self._after(
                    execution, effects, started_waiting=bool(now_waiting - was_waiting)
                )
                # Remembered only now: the steps above may wait, and another task must not
                # change this object meanwhile (it reads the stored state instead).
                self._remember(execution)
                return True
        raise GatewayError(
            f"job {scope}/{job}: state kept changing under {settings.max_cas_retries} tries"
        )

    async def close(self, execution: Execution) -> bool:
        """Mark ``execution``, as just read, ended (``False``: another task closed it first).
        The swap is from that state, with no read and no executor (a report, the one caller,
        has just read it); only a conflict reads again (``mutate``)."""
        self._remembered.pop((execution.scope, execution.job))
        execution.status = Status.ENDED
        commit = await self.write(
            execution, execution.version, Effects(changed=True), set(), waits_for_event=False
        )
        if commit is Commit.WRITTEN:
            return True
        return await self.mutate(execution.scope, execution.job, mark_ended)

    async def _after(
        self, execution: Execution, effects: Effects, *, started_waiting: bool
    ) -> None:
        tries = [(action, execution.actions[action].attempt) for action in effects.sends]
        if tries and self.committed is not None:
            await self.committed(execution.scope, execution.job, tries)
        if started_waiting and self.wait_started is not None:
            await self.wait_started(execution.scope, execution.job)
        if self.report_here is not None and _reported_here(execution, effects):
            self.report_here(execution)

    def remembered(self, scope: str, job: str) -> int | None:
        """The version of the job's state this instance remembers committing (``None``: none)."""
        execution = self._remembered.get((scope, job))
        return None if execution is None else execution.version

    def forget(self, scope: str, job: str) -> None:
        """Drop what is remembered of the job (written elsewhere: the next step reads it)."""
        self._remembered.pop((scope, job))

    def _remember(self, execution: Execution) -> None:
        if execution.status in (Status.ENDED, Status.FINISHING):
            return  # a finishing one is its report's (``report_here``)
        self._remembered.put((execution.scope, execution.job), execution)

    def announce_steps(
        self, execution: Execution, was_active: dict[str, float], now: float
    ) -> None:
        """Tell observers which steps and branches became active or inactive (after a write)."""
        hook = self.context.gateway.plugins.hook.gateway_step_changed
        for node in sorted(was_active.keys() - execution.nodes.keys()):
            self.context.metrics.steps.labels(node).observe(now - was_active[node])
            hook(scope=execution.scope, job_order_id=execution.job, step=node, active=False)
        for node in sorted(execution.nodes.keys() - was_active.keys()):
            hook(scope=execution.scope, job_order_id=execution.job, step=node, active=True)

    async def write(
        self,
        execution: Execution,
        expected: int,
        effects: Effects,
        ended: set[Try],
        take: str | None = None,
        *,
        waits_for_event: bool,
        snapshot: str = "",
        breakpoint: bool = False,
        start: StartBookkeeping | None = None,
    ) -> Commit:
        """Compare-and-swap; ``ended``: the tries that were outstanding and are no longer (their
        timers are cancelled and their outbox entries removed in the same step); ``take``: the
        kept event the change applies, removed from the kept events with it;
        ``waits_for_event``: whether the job now waits for an equipment event; ``snapshot``
        (``expected`` -1, a new job): its recipe snapshot, written with it; ``breakpoint``:
        the change stopped the job at a breakpoint (job management is asked for the Pause);
        ``start``: a create's checks and bookkeeping (``StartBookkeeping``). A write that ends
        the state also forgets the job's breakpoints, parking and kept events."""
        scope, job = execution.scope, execution.job
        keys = self.context.keys
        work: list[list[str]] = []
        if effects.report is not None and not (
            self.report_here is not None and _reported_here(execution, effects)
        ):
            work.append(["kind", "report", "job", job])
        if breakpoint:
            work.append(["kind", "breakpoint", "job", job])
        now = time.time()
        resend_at = now + self.context.settings.outbox_grace_seconds
        done = execution.status is Status.ENDED
        ops = {
            "work": work,
            "cancel": [
                timer_member(job, kind, action, attempt)
                for action, attempt in sorted(ended)
                for kind in TRY_TIMERS
            ],
            "timers": [[timer.due, timer_json(job, timer)] for timer in effects.timers],
            "done": [outbox_member(job, action, attempt) for action, attempt in sorted(ended)],
            "outbox": [
                [resend_at, outbox_member(job, action, execution.actions[action].attempt)]
                for action in effects.sends
            ],
            "waiting": waits_for_event and not done,
            "active": not done,
            "job": job,
            "now": now,
            "ttl": self.context.settings.ended_ttl_seconds if done else 0,
        }
        if take is not None:
            ops["take"] = take
        done_runs = take_done(execution)
        ops["history"] = [[name, dump_action_run(run)] for name, run in done_runs.items()]
        if start is not None:
            ops["earlier"] = start.earlier
            ops["marks"] = sorted(execution.breakpoints)
        if done:
            ops["forget"] = True
        previous_version = execution.version
        execution.version = expected + 1 if expected >= 0 else 0
        redis_keys = [
            keys.execution(scope, job),
            keys.work(scope),
            keys.timers(scope),
            keys.waiting(scope),
            keys.active(scope),
            keys.outbox(scope),
            keys.unclaimed(scope),
            keys.recipe(scope, job),
            keys.history(scope, job),
        ]
        if start is not None or done:
            redis_keys += [
                keys.breakpoints(scope, job),
                keys.work_master_breakpoints(
                    scope, (start.work_master if start is not None else None) or ""
                ),
                keys.parked_jobs(scope),
                keys.parked(scope, job),
            ]
        assert self._commit is not None, "the engine is not running"
        try:
            written = await self._commit(
                keys=redis_keys,
                args=[
                    expected,
                    dump_execution(execution),
                    orjson.dumps(ops),  # the same JSON, compact, from C
                    snapshot,
                    execution.run,
                ],
            )
        except BaseException:
            execution.version = previous_version
            execution.actions.update(done_runs)
            raise
        if isinstance(written, list):  # the end, with the kept events it dropped
            written, dropped = written
            self._dropped_kept(scope, job, int(dropped))
        commit = Commit(int(written))
        if commit is not Commit.WRITTEN:
            execution.version = previous_version
            execution.actions.update(done_runs)
        elif self.due_at is not None and (effects.timers or effects.sends):
            dues = [timer.due for timer in effects.timers]
            if effects.sends:
                dues.append(resend_at)
            self.due_at(min(dues))
        return commit

    def _dropped_kept(self, scope: str, job: str, dropped: int) -> None:
        if dropped:
            self.context.metrics.events_dropped.labels("job_ended").inc(dropped)
            log.info("job %s/%s ended: %d event(s) kept for it dropped", scope, job, dropped)


def _reported_here(execution: Execution, effects: Effects) -> bool:
    """Whether the end ``effects`` report is reported where it is committed (``report_here``):
    an execution finishing, which reconciliation reports again should its report be lost. A
    hold goes through the work stream: a held execution is not looked at again."""
    return effects.report is not None and execution.status is Status.FINISHING


def note_reached(execution: Execution, was_active: Mapping[str, float]) -> None:
    """Add the nodes the change entered to ``Execution.reached`` (kept for edits)."""
    for name in execution.nodes:
        if name not in was_active and name not in execution.reached:
            execution.reached.append(name)


def waiting(execution: Execution) -> set[str]:
    """The job's ``pull_event`` actions waiting for an event."""
    return {run.name for run in execution.actions.values() if run.phase is Phase.WAITING}


def in_flight(execution: Execution) -> tuple[set[str], set[Try]]:
    """``waiting`` and the tries sent (or waiting) and not answered yet, in one pass over the
    job's runs."""
    waiting_for: set[str] = set()
    outstanding: set[Try] = set()
    for run in execution.actions.values():
        if run.phase in OUTSTANDING:
            outstanding.add((run.name, run.attempt))
            if run.phase is Phase.WAITING:
                waiting_for.add(run.name)
    return waiting_for, outstanding


def mark_ended(executor: Executor, execution: Execution, now: float) -> Effects:
    execution.status = Status.ENDED
    return Effects(changed=True)


def outbox_member(job: str, action: str, attempt: int) -> str:
    """``json.dumps([job, action, attempt])``, built directly (several per step)."""
    return f"[{_json_text(job)}, {_json_text(action)}, {int(attempt)}]"


def timer_member(job: str, kind: str, action: str, attempt: int) -> str:
    """A timer's name in the timers set; the due time is its score. The text of
    ``json.dumps({"job", "kind", "action", "attempt"}, sort_keys=True)``, built directly."""
    return (
        f'{{"action": {_json_text(action)}, "attempt": {int(attempt)}, '
        f'"job": {_json_text(job)}, "kind": {_json_text(kind)}}}'
    )


def timer_json(job: str, timer: Timer) -> str:
    if timer.kind in TRY_TIMERS:
        return timer_member(job, timer.kind, timer.action, timer.attempt)
    # Other timers of a job may be set more than once for the same action: the due time
    # keeps them apart.
    return json.dumps(
        {
            "job": job,
            "kind": timer.kind.value,
            "action": timer.action,
            "attempt": timer.attempt,
            "due": timer.due,
        },
        sort_keys=True,
    )


def timer_from_json(text: str, due: str | None = None) -> Timer:
    """The timer a timers-set member names (``due``: its score, for members without it)."""
    data = json.loads(text)
    when = data.get("due", due)
    if when is None:
        raise ValueError(f"timer {text} has no due time")
    return Timer(float(when), TimerKind(data["kind"]), str(data["action"]), int(data["attempt"]))
