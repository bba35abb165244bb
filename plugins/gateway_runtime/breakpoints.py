"""Breakpoints: a job pauses before a step, as if the MES had paused it there.

Kept per job (``rt:bp:<job>``) and per Work Master (``rt:bp-wm:<id>``, for every job of it) and
copied into the job's execution state (``Execution.breakpoints``) when it starts and whenever
they change, so a step reads them with the state it changes: no read more per step, and a job
without breakpoints pays nothing.

How a step is held back works for every format, without its help: each format already stops
where the MES's Pause finds it (nothing new is entered while paused). When a stimulus would
enter a node that is (or dispatches an action that is) a breakpoint, the runtime applies it
again on the state before, paused first (``stop_before``): the step is not entered, nothing is
sent. The commit that stores that also adds a work entry asking job management for the Pause
(``request_pause``), so the job goes to Interrupted.Suspended and the MES or an operator sees
why (``breakpoint before <step>``); their Resume enters the step (``paused_before`` lets it
pass once). The first step of a job is entered when its state is created: a breakpoint there
leaves the job without a state (``rt:parked:<job>``) until the Resume, which creates it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from gateway.controls import BREAKPOINT_REQUESTER
from gateway.errors import ValidationError
from gateway.formats import Effects, Execution, Executor, Status
from gateway.recipes import JobCommand
from gateway_runtime.context import EngineContext
from gateway_runtime.state import dump_execution, load_execution

if TYPE_CHECKING:
    from gateway_runtime.executions import ExecutionStore

log = logging.getLogger(__name__)

Apply = Callable[[Executor, Execution, float], Effects]


def reached(execution: Execution, was_active: Collection[str]) -> str | None:
    """The breakpoint the change just applied to ``execution`` enters, if any: a node entered
    that is one, or an action of such a node that is one. The one it was paused before is let
    pass (and forgotten): the Resume entered it."""
    if not execution.breakpoints:
        return None
    entered = execution.nodes.keys() - set(was_active)
    if not entered:
        return None
    marks = set(execution.breakpoints)
    hits = sorted(entered & marks) + sorted(
        run.name for run in execution.actions.values() if run.step in entered and run.name in marks
    )
    if execution.paused_before in hits or execution.paused_before in entered:
        execution.paused_before = None
        return None
    return hits[0] if hits else None


def left_pause(execution: Execution) -> None:
    """Forget the breakpoint a job was paused before once it is not paused any more (Stop,
    Abort, or a Resume into a step an edit put in its place)."""
    if execution.paused_before is not None and execution.status is not Status.PAUSED:
        execution.paused_before = None


def stop_before(
    executor: Executor, before: str, apply: Apply, step: str, now: float
) -> tuple[Execution, Effects]:
    """The state ``before`` (as dumped) with the change applied that does not enter ``step``:
    paused first (a running job), or left as it was (a paused one the Resume would have moved
    into the step: it stays paused, before it)."""
    execution = load_execution(before)
    if execution.status is Status.RUNNING:
        executor.on_command(execution, JobCommand.PAUSE, now)
        effects = apply(executor, execution, now)
    else:
        effects = Effects()
    execution.paused_before = step
    effects.changed = True
    return execution, effects


def watched(execution: Execution) -> str | None:
    """The state before a change, dumped, when the change may reach a breakpoint."""
    if execution.breakpoints and execution.status in (Status.RUNNING, Status.PAUSED):
        return dump_execution(execution)
    return None


def first_stop(
    executor: Executor, scope: str, job: str, breakpoints: Collection[str]
) -> str | None:
    """The breakpoint a job's start would enter (its first step), tried on a state thrown away."""
    if not breakpoints:
        return None
    execution, _ = executor.start(scope, job, 0.0)
    execution.breakpoints = sorted(breakpoints)
    return reached(execution, ())


def requester(step: str) -> str:
    return f"{BREAKPOINT_REQUESTER} before {step}"


class Breakpoints:
    """Setting, reading and acting on breakpoints."""

    def __init__(self, context: EngineContext, executions: ExecutionStore) -> None:
        self.context = context
        self.executions = executions

    async def of_job(self, scope: str, job: str, work_master: str | None) -> list[str]:
        keys = [self.context.keys.breakpoints(scope, job)]
        if work_master:
            keys.append(self.context.keys.work_master_breakpoints(scope, work_master))
        members = await self.context.client.sunion(keys)
        return sorted(_text(member) for member in members)

    async def set(
        self,
        scope: str,
        step: str,
        *,
        job: str | None,
        work_master: str | None,
        enabled: bool,
    ) -> None:
        """Set or clear, and bring every execution it concerns up to date (a running job of
        the Work Master, or the job)."""
        keys, client = self.context.keys, self.context.client
        if (job is None) == (work_master is None):
            raise ValidationError("breakpoint", "names a job or a Work Master (one of them)")
        key = (
            keys.breakpoints(scope, job)
            if job is not None
            else keys.work_master_breakpoints(scope, work_master or "")
        )
        await (client.sadd if enabled else client.srem)(key, step)
        for running in await self._concerned(scope, job, work_master):
            marks = await self.of_job(scope, running, await self._work_master_of(scope, running))
            await self.executions.mutate(scope, running, _marking(marks))

    async def _concerned(self, scope: str, job: str | None, work_master: str | None) -> list[str]:
        if job is not None:
            return [job]
        members = await self.context.client.smembers(self.context.keys.active(scope))
        return [
            candidate
            for candidate in sorted(_text(member) for member in members)
            if await self._work_master_of(scope, candidate) == work_master
        ]

    async def _work_master_of(self, scope: str, job: str) -> str | None:
        summary = await self.context.gateway.job_control.summary(scope, job)
        return None if summary is None else summary.work_master_id

    async def request_pause(self, scope: str, job: str) -> None:
        """Ask job management for the Pause of a job stopped at a breakpoint (a work entry the
        commit that stopped it wrote), unless it was resumed or ended meanwhile."""
        execution = await self.executions.read(scope, job)
        step = None if execution is None else execution.paused_before
        if execution is not None and (execution.status is not Status.PAUSED or step is None):
            return
        if step is None:
            step = await self.parked_at(scope, job)
            if step is None:
                return
        outcome = await self.context.gateway.job_control.request(
            scope, job, JobCommand.PAUSE, requester(step), reason=f"Paused: {requester(step)}"
        )
        if outcome.accepted:
            log.info("job %s/%s paused before step %s (breakpoint)", scope, job, step)
        else:
            log.info("job %s/%s at breakpoint %s: Pause %s", scope, job, step, outcome.status)

    # -- a breakpoint on the first step: no state until the Resume ---------------------------

    async def held_at_start(
        self, scope: str, job: str, executor: Executor, run: str, marks: list[str]
    ) -> bool:
        """Whether the job, about to start, waits before its first step (a breakpoint there):
        it is paused without a state, which its Resume creates."""
        step = first_stop(executor, scope, job, marks)
        if step is None or await self.executions.exists(scope, job):
            return False
        if not await self.park(scope, job, run, step):
            return False  # resumed: it starts now
        await self.request_pause(scope, job)
        return True

    async def park(self, scope: str, job: str, run: str, step: str) -> bool:
        """Note that run ``run`` of the job waits before its first step; ``False``: it was
        parked there and resumed already (it starts now)."""
        key = self.context.keys.parked(scope, job)
        kept = await self.context.client.get(key)
        if kept is not None:
            parked = json.loads(kept)
            if parked["run"] == run and parked["passed"]:
                return False
        parked = json.dumps({"run": run, "step": step, "passed": False})
        async with self.context.client.pipeline(transaction=True) as pipe:
            pipe.set(key, parked)
            pipe.sadd(self.context.keys.parked_jobs(scope), job)
            await pipe.execute()
        return True

    async def parked_at(self, scope: str, job: str) -> str | None:
        kept = await self.context.client.get(self.context.keys.parked(scope, job))
        if kept is None:
            return None
        parked = json.loads(kept)
        return None if parked["passed"] else str(parked["step"])

    async def unpark(self, scope: str, job: str, run: str) -> bool:
        """The Resume of a parked job: ``True`` when run ``run`` was parked (it starts now)."""
        key = self.context.keys.parked(scope, job)
        kept = await self.context.client.get(key)
        if kept is None or json.loads(kept)["run"] != run:
            return False
        parked = json.loads(kept)
        parked["passed"] = True
        await self.context.client.set(key, json.dumps(parked))
        return True

    async def forget(self, scope: str, job: str) -> None:
        """The job ended: its own breakpoints and parking go."""
        keys = self.context.keys
        async with self.context.client.pipeline(transaction=True) as pipe:
            pipe.delete(keys.parked(scope, job), keys.breakpoints(scope, job))
            pipe.srem(keys.parked_jobs(scope), job)
            await pipe.execute()

    async def started(self, scope: str, job: str) -> None:
        """The job's state exists now: it is parked no more."""
        await self.context.client.srem(self.context.keys.parked_jobs(scope), job)

    async def parked_jobs(self, scope: str) -> dict[str, dict[str, Any]]:
        """The jobs parked before their first step (or resumed, not started yet), by id."""
        keys, client = self.context.keys, self.context.client
        found: dict[str, dict[str, Any]] = {}
        for member in await client.smembers(keys.parked_jobs(scope)):
            job = _text(member)
            kept = await client.get(keys.parked(scope, job))
            if kept is None:
                await client.srem(keys.parked_jobs(scope), job)
            else:
                found[job] = json.loads(kept)
        return found


def _marking(marks: list[str]) -> Apply:
    """The change that gives an execution these breakpoints."""

    def mark(executor: Executor, execution: Execution, now: float) -> Effects:
        if execution.breakpoints == marks:
            return Effects()
        execution.breakpoints = list(marks)
        return Effects(changed=True)

    return mark


def _text(member: str | bytes) -> str:
    return member.decode() if isinstance(member, bytes) else member
