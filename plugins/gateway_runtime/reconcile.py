"""Repairing what a crash lost: unfinished jobs re-examined at start, job management caught up."""

from __future__ import annotations

import logging

from gateway.formats import Status
from gateway.jobstates import JobState, TopState
from gateway.recipes import JobCommand, missed_command
from gateway_runtime.breakpoints import Breakpoints
from gateway_runtime.context import EngineContext
from gateway_runtime.executions import ExecutionStore, waiting
from gateway_runtime.scopes import ScopeRegistry
from gateway_runtime.work import WorkQueue

log = logging.getLogger(__name__)


class Reconciler:
    def __init__(
        self,
        context: EngineContext,
        scopes: ScopeRegistry,
        executions: ExecutionStore,
        work: WorkQueue,
        breakpoints: Breakpoints,
    ) -> None:
        self.context = context
        self.scopes = scopes
        self.executions = executions
        self.work = work
        self.breakpoints = breakpoints
        self.parked = Lingering()
        self.finishing = Lingering()
        self.at_breakpoint = Lingering()
        self.unstarted = Lingering()

    async def recovery_scan(self) -> None:
        """Re-examine every unfinished job once: re-send what waits, advance what can."""
        keys, client = self.context.keys, self.context.client
        for scope in self.scopes.scopes:
            for job in await self.scopes.members(keys.active(scope)):
                await client.xadd(keys.work(scope), {"kind": "resume", "job": job})

    async def reconcile(self) -> None:
        """Catch up with job management where a crash lost a hand-off.

        Job management changes a job's state first and tells the interpreter after; an
        instance dying in between leaves a job in AllowedToStart that nobody runs, or an execution
        still running for a job the MES paused, stopped or aborted. Both are repaired here,
        and a waiting job takes the equipment events kept for it that it missed.
        """
        control = self.context.gateway.job_control
        keys = self.context.keys
        for scope in self.scopes.scopes | await self.context.store.known_scopes():
            startable = await control.startable(scope)
            for job in startable:
                if await self.executions.exists(scope, job):
                    continue
                if await self._ours(scope, job):
                    log.info("job %s/%s waits in AllowedToStart: starting it", scope, job)
                    await self.work.start(scope, job)
            await self._unstarted(scope, set(startable))
            kept_events = bool(await self.context.client.llen(keys.unclaimed(scope)))
            for job in await self.scopes.members(keys.active(scope)):
                execution = await self.executions.read(scope, job)
                if execution is None:
                    continue
                if kept_events and waiting(execution) and self.executions.wait_started:
                    # A job looks at the kept events when it starts waiting; that look may
                    # have come just before its event was kept, or been lost with its
                    # instance or with its commit's answer in a failover. Look again.
                    await self.executions.wait_started(scope, job)
                state = await control.state(scope, job)
                # A report may be under way right now (on this or another instance): only an
                # end that stayed unreported from one pass to the next was lost.
                lost = report_lost(state, execution.status)
                if lost and self.finishing.again((scope, job), execution.version):
                    log.info("job %s/%s: reporting the end of its execution again", scope, job)
                    await self.work.report(scope, job)
                command = lost_command(state, execution.status)
                if (
                    command is JobCommand.RESUME
                    and execution.paused_before is not None
                    and not self.at_breakpoint.again((scope, job), execution.version)
                ):
                    # Stopped at a breakpoint, its Pause not asked for yet (a work entry
                    # written with the stop does): only a Running job that stays so from one
                    # pass to the next was resumed, its Resume lost.
                    continue
                if command is not None and await self.executions.still_going(execution):
                    log.info("job %s/%s: the execution missed %s; applying it", scope, job, command)
                    await self.work.command(scope, job, command, execution.run)
            await self._parked(scope)
        self.unstarted.next_pass()
        self.finishing.next_pass()
        self.at_breakpoint.next_pass()
        self.parked.next_pass()

    async def _ours(self, scope: str, job: str) -> bool:
        """Whether the job's recipe runs on this runtime (a format installed here)."""
        recipe_job = await self.context.gateway.job_control.job(scope, job)
        return recipe_job is not None and recipe_job.dataschema in self.context.formats

    async def _unstarted(self, scope: str, startable: set[str]) -> None:
        """Jobs let start, out of AllowedToStart, with no execution and not parked before their
        first step: the instance that started the job (where it was admitted) died between its
        Run and its create. Started now (the start finds the job running and creates its
        execution); only a job seen so from one pass to the next, as a start may be under way."""
        keys, client = self.context.keys, self.context.client
        admitted = set((await self.context.gateway.job_control.queue(scope)).running)
        candidates = sorted(
            admitted - startable - await self.scopes.members(keys.parked_jobs(scope))
        )
        if not candidates:
            return
        async with client.pipeline(transaction=False) as pipe:
            for job in candidates:
                pipe.exists(keys.execution(scope, job))
            found = await pipe.execute()
        for job, exists in zip(candidates, found, strict=True):
            if exists or not self.unstarted.again((scope, job), 0):
                continue
            if await self._ours(scope, job):
                log.info(
                    "job %s/%s runs with no execution (its start was lost): starting it", scope, job
                )
                await self.work.start(scope, job)

    async def _parked(self, scope: str) -> None:
        """Jobs paused before their first step (no state yet): one that is Running again
        lost the start its Resume makes (a crash between the two), and is started now; one
        that ended is forgotten."""
        control = self.context.gateway.job_control
        for job, parked in (await self.breakpoints.parked_jobs(scope)).items():
            if await self.executions.exists(scope, job):
                await self.breakpoints.started(scope, job)
                continue
            state = await control.state(scope, job)
            if state is None or state.final or state.top is TopState.END:
                await self.breakpoints.forget(scope, job)
                continue
            if state.top is not TopState.RUNNING:
                continue  # paused: it waits for its Resume
            # Running and not resumed yet: its Pause may be under way; only a job Running
            # from one pass to the next was resumed, and its start lost.
            if parked["passed"] or self.parked.again((scope, job), 0):
                log.info("job %s/%s resumed before its first step: starting it", scope, job)
                await self.breakpoints.unpark(scope, job, str(parked["run"]))
                await self.work.start(scope, job)


class Lingering:
    """What one reconciliation pass saw that the pass before saw unchanged."""

    def __init__(self) -> None:
        self._before: dict[tuple[str, str], int] = {}
        self._now: dict[tuple[str, str], int] = {}

    def again(self, key: tuple[str, str], version: int) -> bool:
        """Note ``key`` at ``version``; whether the previous pass saw it at the same one."""
        self._now[key] = version
        return self._before.get(key) == version

    def next_pass(self) -> None:
        self._before, self._now = self._now, {}


def report_lost(state: JobState | None, status: Status) -> bool:
    """Whether a finishing execution may have lost its report: its completion waited for the MES to
    resume the job (``report_completed``), and the Resume, Stop or Abort reached job management
    but not the execution (a crash in between)."""
    return (
        status is Status.FINISHING and state is not None and state.top is not TopState.INTERRUPTED
    )


def lost_command(state: JobState | None, status: Status) -> JobCommand | None:
    """The MES command an execution in ``status`` missed, given its job's state (``None``: none).

    An execution that is finishing reports its own end, so the job's end state is then its own
    doing. A held execution is left alone: it may not have reported the hold yet.
    """
    if status not in (Status.RUNNING, Status.PAUSED):
        return None
    return missed_command(state, paused=status is Status.PAUSED)
