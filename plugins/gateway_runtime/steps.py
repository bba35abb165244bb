"""What one work entry does to its job: start it, apply a stimulus, send, report."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.compensation import (
    COMPENSATIONS_ID,
    FAILED_SAFE,
    FAILED_UNSAFE,
    ROLLBACK_ID,
    SIDE_EFFECTS_ID,
)
from gateway.equipment import CorrelationId
from gateway.errors import GatewayError, ValidationError
from gateway.formats import Effects, Execution, Phase, Status, Timer, TimerKind
from gateway.jobstates import TopState
from gateway.recipes import (
    JobCommand,
    JobOutcome,
    ProcessValue,
    missed_command,
    report_completed,
)
from gateway.resilience import TransientError, is_transient
from gateway_runtime.binding import bind_equipment, fan_out_members
from gateway_runtime.breakpoints import Breakpoints
from gateway_runtime.context import EngineContext
from gateway_runtime.events import EventRouter
from gateway_runtime.executions import (
    Commit,
    ExecutionStore,
    StartBookkeeping,
    outbox_member,
    timer_from_json,
)
from gateway_runtime.scopes import ScopeRegistry
from gateway_runtime.snapshots import RecipeCache, Snapshot

log = logging.getLogger(__name__)

# ``StepHandlers._create``: the job waits before its first step, with no state yet.
_PARKED = Execution("", "")


class StepHandlers:
    """Handles one work entry of each kind (``kind`` field: start, reply, event, timer, ...)."""

    def __init__(
        self,
        context: EngineContext,
        scopes: ScopeRegistry,
        executions: ExecutionStore,
        recipes: RecipeCache,
        events: EventRouter,
        breakpoints: Breakpoints,
    ) -> None:
        self.context = context
        self.breakpoints = breakpoints
        self.scopes = scopes
        self.executions = executions
        self.recipes = recipes
        self.events = events
        self._published: dict[str, set[str]] = {}  # scope -> outbox entries sent

    async def handle(self, scope: str, fields: Mapping[str, str]) -> None:
        kind = fields["kind"]
        if kind == "event":
            await self.events.route(scope, json.loads(fields["event"]))
            return
        job = fields["job"]
        mutate = self.executions.mutate
        if kind == "start":
            await self.start(scope, job)
        elif kind == "send":
            await self.send(scope, job, fields["action"], int(fields["attempt"]))
        elif kind == "report":
            await self.report(scope, job)
        elif kind == "breakpoint":
            await self.breakpoints.request_pause(scope, job)
        elif kind == "timer":
            timer = timer_from_json(fields["timer"], fields.get("due"))
            offline = await self._offline_reason(scope, job, timer)
            await mutate(
                scope, job, lambda ex, execution, now: ex.on_timer(execution, timer, now, offline)
            )
        elif kind == "command":
            await self.command(scope, job, JobCommand(fields["command"]), fields["run"])
        elif kind == "resume":
            await mutate(scope, job, lambda ex, execution, now: ex.on_resume(execution, now))
        else:
            raise ValueError(f"unknown work entry kind {kind!r}")

    async def command(self, scope: str, job: str, command: JobCommand, run: str) -> None:
        """The MES's command; one for a job parked before its first step (no state yet) starts
        it (Resume) or lets it go (Stop, Abort)."""
        applied = await self.executions.mutate(
            scope,
            job,
            lambda ex, execution, now: (
                ex.on_command(execution, command, now)
                if _same_run(run, execution)
                else _ignored_command(execution, command)
            ),
        )
        if applied or await self.executions.exists(scope, job):
            return
        if command is JobCommand.RESUME and await self.breakpoints.unpark(scope, job, run):
            log.info("job %s/%s resumed before its first step: starting it", scope, job)
            await self.start(scope, job)
        elif command in (JobCommand.STOP, JobCommand.ABORT):
            await self.breakpoints.forget(scope, job)

    async def reply(
        self, scope: str, job: str, action: str, attempt: int, data: Any, error: str | None
    ) -> None:
        """Apply an equipment reply (repeated or late ones change nothing)."""
        await self.executions.mutate(
            scope,
            job,
            lambda ex, execution, now: ex.on_reply(
                _noting_late_reply(execution, action, attempt), action, attempt, data, error, now
            ),
        )

    async def start(self, scope: str, job: str) -> None:
        control = self.context.gateway.job_control
        # Run first: a job that is gone or not startable refuses it, and no read comes before.
        started_now = await control.run(scope, job)
        state = None
        if not started_now:
            state = await control.state(scope, job)
            # Running or paused since: it started (a start handled twice, the first one slow
            # or gone), and its execution is created if it is not yet. Revoked, aborted...: not.
            if state is None or state.top not in (TopState.RUNNING, TopState.INTERRUPTED):
                if state is None:
                    log.warning("job %s/%s to start no longer exists", scope, job)
                else:
                    log.info("job %s/%s not started: it is %s", scope, job, state)
                return
        # Read now that it runs: an edit of its steps made before, while it waited, is in its
        # Work Master (job management edits it there only before the job runs).
        recipe_job = await control.job(scope, job)
        if recipe_job is None:
            log.warning("job %s/%s to start no longer exists", scope, job)
            return
        dataschema = recipe_job.dataschema or ""
        try:
            program = self.recipes.program(dataschema, recipe_job.recipe)
        except ValidationError as error:
            await self._never_runs(scope, job, f"invalid recipe: {error}")
            return
        # Routed by type now (the configuration may have changed since Store), once for the run.
        hub = self.context.gateway.equipment
        bound, problems = await bind_equipment(hub, scope, program)
        members, more = await fan_out_members(hub, scope, program, recipe_job.parameters())
        problems += more
        if problems:
            await self._never_runs(scope, job, "unroutable recipe: " + "; ".join(problems))
            return
        # One run per stored job order: a start handled twice (an instance frozen mid-way,
        # its work taken over) is the same run, and does not start a job that ended again.
        run = recipe_job.stored_at
        # A job this start let run has had no MES command yet but the ones the look after the
        # create catches; one started before may have had any.
        if not started_now and missed_command(state, paused=False) in (
            JobCommand.STOP,
            JobCommand.ABORT,
        ):
            log.info("job %s/%s not started: the MES ended it meanwhile", scope, job)
            return
        snapshot = self.recipes.snapshot(
            dataschema, recipe_job.recipe, recipe_job.parameters(), run, bound, members=members
        )
        work_master = recipe_job.work_master.get("ID")
        created = await self._create(
            scope, job, snapshot, work_master if isinstance(work_master, str) else None
        )
        if created is _PARKED:
            return
        if created is not None:
            log.info("job %s/%s: recipe started", scope, job)
        # An MES command that came while the execution was being created found none, and was
        # dropped; one that came between a first handling of this start and a crash, likewise.
        # It applies now (reconciliation would, but later); applied twice, it changes nothing.
        # The execution is looked at before the job's state (the one just created, as it was
        # written): a start handled twice, late, may find the job ended by the execution's own
        # end, committed between the two looks: no Stop.
        execution = created or await self.executions.read(scope, job)
        command = await self._missed_command(scope, job, run)
        if (
            command is not None
            and execution is not None
            and execution.status not in (Status.FINISHING, Status.ENDED)
            and await self.executions.still_going(execution)
        ):
            log.info("job %s/%s: %s came as it started; applying it", scope, job, command)
            await self.executions.mutate(
                scope,
                job,
                lambda ex, execution, now: (
                    ex.on_command(execution, command, now)
                    if _same_run(run, execution)
                    else _ignored_command(execution, command)
                ),
            )

    async def _missed_command(self, scope: str, job: str, run: str) -> JobCommand | None:
        """The MES command an execution of ``run`` starting now would miss, from its job's state."""
        summary = await self.context.gateway.job_control.summary(scope, job)
        if summary is not None and run and summary.stored_at != run:
            return JobCommand.ABORT  # the id names a job order stored since
        return missed_command(None if summary is None else summary.state, paused=False)

    async def _create(
        self, scope: str, job: str, snapshot: Snapshot, work_master: str | None
    ) -> Execution | None:
        """Create the run's first state, with its snapshot, in one script with the start's
        bookkeeping; the state as created (a copy: the one kept goes on), ``None``: this run
        was started already (e.g. by another instance), ``_PARKED``: it waits before its first
        step (a breakpoint there). Its tries are numbered on from the job id's earlier run, if
        its state is kept. An earlier run that has not ended yet (MES Abort, Clear and Store
        back to back) raises ``TransientError``: the start is tried again, and succeeds once
        that run has ended. The script says when the earlier state or the breakpoints are not
        what the caller assumed (none: a job id's first run, no breakpoints), and only then
        are they read."""
        earlier: Execution | None = None
        marks: list[str] = []
        executor = self.context.executor(snapshot.program, snapshot.parameters)
        for _ in range(self.context.settings.max_cas_retries):
            attempts = earlier.attempts if earlier is not None else None
            execution, effects = executor.start(scope, job, time.time(), attempts)
            execution.run = snapshot.run
            execution.breakpoints = marks
            first = Execution(scope, job, run=snapshot.run, status=execution.status)
            # Kept before the commit: the commands it dispatches are sent from the snapshot.
            self.recipes.keep(scope, job, snapshot)
            bookkeeping = StartBookkeeping(earlier.run if earlier is not None else "", work_master)
            try:
                commit = await self.executions.create(
                    execution, effects, snapshot.document(), bookkeeping
                )
            except BaseException:  # maybe not written: the stored snapshot decides
                self.recipes.forget(scope, job)
                raise
            if commit is Commit.WRITTEN:
                return first
            self.recipes.forget(scope, job)
            if commit is Commit.CONFLICT:
                return None
            if commit is Commit.EARLIER_RUNNING:
                raise TransientError(f"job {scope}/{job}: its earlier run has not ended yet")
            if commit is Commit.EARLIER_UNREAD:
                earlier = await self.executions.read(scope, job)
            elif commit is Commit.MARKS_CHANGED:
                marks = await self.breakpoints.of_job(scope, job, work_master)
                if await self.breakpoints.held_at_start(scope, job, executor, snapshot.run, marks):
                    return _PARKED
        raise GatewayError(f"job {scope}/{job}: its start kept changing under it")

    async def _never_runs(self, scope: str, job: str, error: str) -> None:
        await self.context.gateway.job_control.abort(scope, job, JobOutcome(error=error))
        await self.events.drop_kept_for(scope, job)  # it held its equipment until now

    async def _offline_reason(self, scope: str, job: str, timer: Timer) -> str | None:
        """Why the equipment of a timed-out action is offline (``None``: online or unknown)."""
        if timer.kind not in (TimerKind.TIMEOUT, TimerKind.LIVENESS):
            return None
        snapshot = await self.recipes.get(scope, job)
        action = snapshot.spec(timer.action)
        if action is None or not action.equipment:
            return None
        return await self.context.gateway.equipment.offline_reason(action.equipment)

    async def send(self, scope: str, job: str, action_name: str, attempt: int) -> None:
        """Send a command again (a work entry: its first publication was not confirmed)."""
        execution = await self.executions.read(scope, job)
        if execution is None:
            return
        run = execution.actions.get(action_name)
        if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
            return  # cancelled or answered meanwhile
        await self.recipes.get(
            scope, job, execution.run, execution.recipe
        )  # this run's, kept for ``_publish``
        await self._publish(scope, job, action_name, attempt)

    async def publish(self, scope: str, job: str, tries: Sequence[tuple[str, int]]) -> None:
        """Send the commands a commit just dispatched; ``flush_published`` then drops them
        from the outbox (or the commit of their reply does, whichever comes first)."""
        for action, attempt in tries:
            try:
                published = await self._publish(scope, job, action, attempt)
            except GatewayError as error:  # transient: the broker is away
                # The commit stands and the command waits in the outbox, which sends it again
                # after ``outbox_grace_seconds`` (the same correlation id).
                log.info("job %s/%s: %s not sent yet (%s)", scope, job, action, error)
                continue
            if published:
                self._published.setdefault(scope, set()).add(outbox_member(job, action, attempt))

    async def flush_published(self) -> None:
        """Drop the commands published since the last flush from the outbox, one command per
        scope. (An instance that dies first leaves them there: they are sent once more.)"""
        published, self._published = self._published, {}
        for scope, members in published.items():
            await self.context.client.zrem(self.context.keys.outbox(scope), *members)

    async def _publish(self, scope: str, job: str, action_name: str, attempt: int) -> bool:
        """Send one try's command (``False``: it could not be delivered, and the try failed)."""
        snapshot = await self.recipes.get(scope, job)
        command = snapshot.command(scope, job, action_name, attempt)
        try:
            # The snapshot names the equipment: replies are checked against it (``Coordinator.
            # checked_reply``), so the hub keeps no record of its own.
            await self.context.gateway.equipment.send(
                command, recorded=command.equipment is not None
            )
        except GatewayError as error:
            if is_transient(error):
                raise  # the broker is away: sent again once it is back (same correlation id)
            # No driver, or the driver could not deliver: this try failed.
            log.warning("job %s/%s: %s not delivered: %s", scope, job, action_name, error)
            await self._fail_try(scope, job, action_name, attempt, str(error))
            return False
        self.context.metrics.commands.labels(command.type).inc()
        return True

    async def _fail_try(self, scope: str, job: str, action: str, attempt: int, error: str) -> None:
        await self.executions.mutate(
            scope,
            job,
            lambda ex, execution, now: ex.on_reply(
                execution, action, attempt, None, error, now, delivered=False
            ),
        )

    async def _touched(self, scope: str, job: str, execution: Execution) -> list[str]:
        """The equipment the job sent commands to."""
        snapshot = await self.recipes.get(scope, job, execution.run)
        specs = (snapshot.spec(name) for name in execution.attempts)
        return sorted({spec.equipment for spec in specs if spec and spec.equipment})

    async def _block_touched(self, scope: str, job: str, execution: Execution) -> None:
        """Block the equipment the job sent commands to: a rollback left it unsafe."""
        touched = await self._touched(scope, job, execution)
        reason = f"job {job} failed unsafe: {execution.error}"
        await self.context.gateway.job_control.block(scope, job, touched, reason)

    async def hold_for_rollback(self, scope: str, job: str) -> None:
        """The MES aborts the job: its end frees its equipment at once, while the rollback of
        what it did is still to run. Block what it touched until the rollback says how it
        ended (called before the dispatcher's next pass of this instance)."""
        execution = await self.executions.read(scope, job)
        undoing = (Status.RUNNING, Status.PAUSED, Status.HELD, Status.COMPENSATING)
        if execution is None or not execution.compensable or execution.status not in undoing:
            return
        touched = await self._touched(scope, job, execution)
        reason = f"job {job} is being rolled back (aborted by the MES)"
        await self.context.gateway.job_control.block(scope, job, touched, reason)

    async def report(self, scope: str, job: str, execution: Execution | None = None) -> None:
        """Tell job control how the execution ended (or that it holds), then close the state
        (``execution``: as just committed; ``None``: read)."""
        if execution is None:
            execution = await self.executions.read(scope, job)
        if execution is None:
            return
        control = self.context.gateway.job_control
        run = execution.run or None  # reports leave a job id stored again since alone
        if execution.status is Status.HELD:
            if await control.hold(scope, job, execution.error or "an action failed", run=run):
                failed = execution.results.get(execution.failed_action or "")
                if failed is not None:  # the failed action's error reply data, beside the error
                    value = ProcessValue(id=execution.failed_action or "", value=failed)
                    await control.record_results(scope, job, [value], run=run)
            return
        if execution.status is not Status.FINISHING:
            return
        if execution.rollback is not None and execution.rollback.safe is False:
            # Before the end frees the equipment: no job starts on it in between.
            await self._block_touched(scope, job, execution)
        outcome = JobOutcome(
            results=[
                *(ProcessValue(id=name, value=value) for name, value in execution.results.items()),
                *rollback_results(execution),
            ],
            error=execution.error,
            side_effects=execution.side_effects,
            correlation_id=_failed_command(execution),
        )
        if execution.outcome == "completed":
            if not await report_completed(control, scope, job, outcome, run=run):
                log.info(
                    "job %s/%s: its recipe completed as the MES paused it; reported when "
                    "the MES resumes it",
                    scope,
                    job,
                )
                return
        elif execution.outcome == "aborted":
            await control.abort(scope, job, outcome, run=run)
        else:  # stopped or aborted by the MES: the job's state is already set
            await control.record_results(scope, job, outcome.results, run=run)
        if execution.rollback is not None and execution.rollback.safe:
            # What the job held while it was rolled back (``hold_for_rollback``) is safe now;
            # released once its results say so.
            await control.release(scope, job)
        # The close forgets the job's breakpoints, parking and kept events with it.
        ended_here = await self.executions.close(execution)
        self.recipes.forget(scope, job)
        if not ended_here:
            # Another report of the same end (the reconciler's, or a work entry claimed from
            # an instance thought dead) closed the state first: it counts and logs the end.
            return
        self.context.metrics.charts.labels(execution.outcome or "unknown").inc()
        log.info("job %s/%s: recipe %s", scope, job, execution.outcome)


def rollback_results(execution: Execution) -> list[ProcessValue]:
    """The Job Response entries of a rollback that ended: how, and each compensation. The
    side-effects flag too: a job the MES aborted gets it only from here."""
    rollback = execution.rollback
    if rollback is None or rollback.safe is None:
        return []
    return [
        ProcessValue(ROLLBACK_ID, FAILED_SAFE if rollback.safe else FAILED_UNSAFE),
        ProcessValue(COMPENSATIONS_ID, rollback.ran),
        ProcessValue(SIDE_EFFECTS_ID, not rollback.safe),
    ]


def _same_run(run: str, execution: Execution) -> bool:
    """Whether a command for ``run`` is for this state's run (not an earlier job order's)."""
    return run == execution.run


def _ignored_command(execution: Execution, command: JobCommand) -> Effects:
    """An MES command for an earlier run of the job id (cleared and stored again since)."""
    log.info("%s for an earlier run of job %s ignored", command.value, execution.job)
    return Effects()


def _noting_late_reply(execution: Execution, action: str, attempt: int) -> Execution:
    """Log a reply that comes after its try ended (timed out, retried, cancelled): it is
    taken off the work stream and changes nothing."""
    run = execution.actions.get(action)
    if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
        now = f"try {run.attempt} {run.phase.value}" if run is not None else "done or gone"
        log.info("reply to %s try %d came after that try ended (%s); ignored", action, attempt, now)
    return execution


def _failed_command(execution: Execution) -> str | None:
    """The correlation id of the command whose failure ended the execution, if one did."""
    for run in execution.actions.values():
        if run.phase is Phase.FAILED:
            return str(CorrelationId(execution.job, run.name, run.attempt))
    return None
