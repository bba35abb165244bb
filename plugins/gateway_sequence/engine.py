"""The sequence engine: job control, the equipment hub and Redis around the pure executor.

Each stimulus (start, equipment reply, timeout, MES command) is applied where it arrives, on
any instance: read the run, apply, compare-and-swap (``runs``), then carry out the effects:
send the commands, tell job control. The engine is the interpreter's counterpart and the
equipment sink of its jobs; its service (``interpreter.SequenceService``) fires timeouts and
repairs what a crash interrupted (``reconcile``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskGroup

from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.errors import GatewayError
from gateway.jobstates import TopState
from gateway.logs import log_context
from gateway.recipes import (
    JobCommand,
    JobOutcome,
    ProcessValue,
    RecipeJob,
    recipe_version,
    report_completed,
)
from gateway.resilience import is_transient
from gateway.store import Store
from gateway_sequence.executor import Effects, Sequencer
from gateway_sequence.model import RecipeError, load_sequence
from gateway_sequence.runs import Created, RunStore, TimerEntry, TimerKind
from gateway_sequence.settings import SequenceSettings
from gateway_sequence.state import Outcome, Run, Status

if TYPE_CHECKING:
    from gateway.phases import InterpreterPhase

log = logging.getLogger(__name__)

_SEQUENCERS_KEPT = 256
Stimulus = Callable[[Sequencer, Run, float], Effects]


class SequenceEngine:
    """Runs sequence recipes; ``gateway.equipment.EquipmentSink`` and ``JobOwner`` of its jobs."""

    def __init__(self, settings: SequenceSettings, gateway: InterpreterPhase) -> None:
        self.settings = settings
        self.gateway = gateway
        self.runs = RunStore(lambda: self.store, settings)
        self._sequencers: OrderedDict[str, Sequencer] = OrderedDict()
        self._scopes: set[str] = set()
        self._scopes_read_at: float | None = None
        self._legacy_cursor = 0  # HSCAN cursor in an earlier version's job -> scope hash
        self.tasks: TaskGroup | None = None  # the engine service's, while it runs

    @property
    def store(self) -> Store:
        store = self.gateway.store
        if store is None:
            raise GatewayError("the sequence engine needs a store (is the redis plugin blocked?)")
        return store

    # -- the interpreter's side -------------------------------------------------------------

    async def start(self, job: RecipeJob) -> None:
        """Store the run (durable before anything is sent), then begin it."""
        try:
            load_sequence(job.recipe)
        except RecipeError as error:  # changed since it was validated: cannot happen, but say so
            await self.gateway.job_control.abort(
                job.scope, job.job_order_id, JobOutcome(error=f"invalid recipe: {error}")
            )
            return
        run = Run(
            scope=job.scope,
            job=job.job_order_id,
            recipe=job.recipe,
            parameters=job.parameters(),
            status=Status.STARTING,
            started_at=time.time(),
            stored_at=job.stored_at or "",
        )
        created = await self.runs.create(run)
        self._scopes.add(run.scope)
        if created is Created.EARLIER_RUNS:
            log.info(
                "job %s/%s: the sequence of the job order stored before under this id has not "
                "ended yet; started once it has",
                job.scope,
                run.job,
            )
            return  # reconciliation starts it then
        if created is Created.EXISTS:
            log.info("job %s/%s has a sequence already; continuing it", job.scope, run.job)
        # Stored: the rest may happen later (a crash before it leaves the run ``starting``,
        # which reconciliation begins), so the MES's call is not held up by the equipment.
        await self._soon(self.begin, job.scope, job.job_order_id)

    async def begin(self, scope: str, job: str) -> None:
        """AllowedToStart -> Running, then the first block goes out."""
        control = self.gateway.job_control
        if not await control.run(scope, job):
            state = await control.state(scope, job)
            if state is None or state.top is not TopState.RUNNING:  # revoked, aborted...
                log.info("job %s/%s not started: it is %s", scope, job, state)
                return
        await self.apply(scope, job, lambda sequencer, run, now: sequencer.begin(run, now))

    async def command(self, scope: str, job: str, command: JobCommand) -> None:
        """Apply the MES's command now; what follows from it (commands, reports) soon after."""
        await self.apply(
            scope,
            job,
            lambda sequencer, run, now: sequencer.on_command(run, command, now),
            later=True,
        )

    async def _soon(self, work: Callable[..., Awaitable[None]], *arguments: Any) -> None:
        """``work`` in the engine service's task group: what the MES's call need not wait for
        (inline when the service does not run in this instance's role). A failure there is
        logged; what it left undone, reconciliation repairs."""
        if self.tasks is None:
            await work(*arguments)
            return

        async def logged() -> None:
            try:
                await work(*arguments)
            except Exception:
                log.exception("sequence engine: %s failed (reconciliation repairs)", work.__name__)

        self.tasks.start_soon(logged)

    # -- the equipment sink -----------------------------------------------------------------

    async def reply(self, reply: EquipmentReply) -> None:
        """Apply the reply (stored before this returns: the driver acknowledges after)."""
        try:
            job, step, attempt = reply.correlation_id.rsplit(":", 2)
            number = int(attempt)
        except ValueError:
            log.warning("reply with foreign correlation id %r ignored", reply.correlation_id)
            return
        scope = reply.scope or await self.runs.job_scope(job)
        if scope is None:
            log.warning("reply %s for unknown job %s ignored", reply.correlation_id, job)
            return
        with log_context(scope=scope, job=job, correlationid=reply.correlation_id):
            await self.apply(
                scope,
                job,
                lambda sequencer, run, now: sequencer.on_reply(
                    run, step, number, reply.data, reply.error, now
                ),
            )

    async def event(self, event: EquipmentEvent) -> None:
        """Sequence steps wait for replies, never for events: nothing here takes one."""
        log.debug("event %s (%s) not for a sequence step; dropped", event.id, event.type)

    async def runs_job(self, job_order_id: str, scope: str | None) -> bool:
        """``gateway.equipment.JobOwner``: whether the job runs a sequence."""
        known = await self.runs.job_scope(job_order_id)
        return known is not None and (scope is None or known == scope)

    async def equipment_online(self, equipment_id: str) -> None:
        """``gateway.equipment.OnlineObserver``: the commands still waiting for this equipment's
        reply go out again (same correlation id), as it may have missed them while away."""
        for scope in await self.scopes():
            for job in await self.runs.active(scope):
                run = await self.runs.read(scope, job)
                if run is None:
                    continue
                for step, _ in sorted(run.outstanding()):
                    if await self._equipment_of(run, step) == equipment_id:
                        log.info(
                            "job %s/%s: %s sent again (%s is back)", scope, job, step, equipment_id
                        )
                        await self._send(run, step)

    # -- timers ---------------------------------------------------------------------------

    async def fire_due_timers(self) -> None:
        """Apply every due timeout, and send again what was not confirmed sent, of all scopes."""
        now = time.time()
        for scope in await self.scopes():
            for entry in await self.runs.due(scope, now):
                with log_context(scope=scope, job=entry.job):
                    await self._fire(scope, entry)
                # Only now: an instance dying before this leaves the entry to another one.
                await self.runs.drop(scope, entry)

    async def scopes(self) -> list[str]:
        """The scopes that ran a sequence. The store's set is read at most every
        ``scope_poll_seconds`` (the timer poll would read it 20 times a second, most often on
        an idle station); a scope this instance starts a run in is known at once."""
        now = time.monotonic()
        last = self._scopes_read_at
        if last is None or now - last >= self.settings.scope_poll_seconds:
            self._scopes.update(await self.runs.scopes())
            self._scopes_read_at = now
        return sorted(self._scopes)

    async def drop_ended_legacy_scopes(self) -> None:
        """Versions before the per-job ``seq:job-scope:<job>`` kept every job's scope in one
        hash, and removed an entry only when its run ended under the new version: the entries
        of jobs that had ended before the upgrade stayed for good. A bounded part of the hash
        is looked at per call (reconciliation); an entry goes once its run has ended, or its
        job has no run and is gone from job management (one that exists may be starting)."""
        self._legacy_cursor, entries = await self.runs.legacy_job_scopes(self._legacy_cursor)
        ended = [job for job, scope in entries.items() if await self._has_ended(scope, job)]
        if ended:
            await self.runs.drop_legacy_job_scopes(ended)
            log.info("dropped %d job scopes an earlier version kept for ended jobs", len(ended))

    async def _has_ended(self, scope: str, job: str) -> bool:
        run = await self.runs.read(scope, job)
        if run is not None:
            return run.status is Status.ENDED
        return await self.gateway.job_control.state(scope, job) is None

    async def _fire(self, scope: str, entry: TimerEntry) -> None:
        if entry.kind is TimerKind.SEND:
            run = await self.runs.read(scope, entry.job)
            if run is not None and (entry.step, entry.attempt) in run.outstanding():
                log.info("job %s/%s: %s sent again (not confirmed)", scope, entry.job, entry.step)
                await self._send(run, entry.step)
            return
        offline = await self._offline_reason(scope, entry)
        await self.apply(
            scope,
            entry.job,
            lambda sequencer, run, now: sequencer.on_timeout(
                run, entry.step, entry.attempt, now, offline
            ),
        )

    async def _offline_reason(self, scope: str, entry: TimerEntry) -> str | None:
        run = await self.runs.read(scope, entry.job)
        if run is None:
            return None
        if entry.step not in run.steps:
            return None
        equipment = await self._equipment_of(run, entry.step)
        return None if equipment is None else await self.gateway.equipment.offline_reason(equipment)

    # -- applying a stimulus ----------------------------------------------------------------

    def sequencer(self, run: Run) -> Sequencer:
        """The executor of the run's recipe (compiled once per recipe version)."""
        version = recipe_version(run.recipe)
        sequencer = self._sequencers.pop(version, None) or Sequencer(load_sequence(run.recipe))
        self._sequencers[version] = sequencer
        if len(self._sequencers) > _SEQUENCERS_KEPT:
            self._sequencers.popitem(last=False)
        return sequencer

    async def apply(self, scope: str, job: str, stimulus: Stimulus, *, later: bool = False) -> None:
        """Apply ``stimulus`` to the job's stored run, then carry out its effects (``later``:
        in the background, once the change is stored)."""

        def applied(run: Run, now: float) -> Effects:
            return stimulus(self.sequencer(run), run, now)

        done = await self.runs.mutate(scope, job, applied)
        if done is not None:
            await (self._soon(self._after, *done) if later else self._after(*done))

    async def _after(self, run: Run, effects: Effects) -> None:
        for step in effects.sends:
            await self._send(run, step)
        if effects.report is not None:
            await self.report(run)

    def _command(self, run: Run, step: str) -> EquipmentCommand:
        """The command of the step's latest try."""
        command = self.sequencer(run).recipe.command(step)
        return EquipmentCommand(
            correlation_id=f"{run.job}:{step}:{run.steps[step].attempt}",
            type=command.type_id,
            equipment=command.equipment,
            scope=run.scope,
            job_order_id=run.job,
            action=step,
            parameters=command.parameters,
            job_parameters=run.parameters,
            timeout_seconds=command.timeout_seconds,
        )

    async def _equipment_of(self, run: Run, step: str) -> str | None:
        """The equipment the step's command goes to: the one it names, or the one its type
        routes to (``None``: a driver serving the type decides)."""
        return (await self.gateway.equipment.routed(self._command(run, step))).equipment

    async def _send(self, run: Run, step: str) -> None:
        """Send the step's latest try; a command no driver delivers fails that try."""
        outgoing = self._command(run, step)
        attempt = run.steps[step].attempt
        try:
            await self.gateway.equipment.send(outgoing)
        except Exception as error:
            if is_transient(error):  # the broker is away: the timers entry sends it again
                log.info("job %s/%s: %s not sent yet (%s)", run.scope, run.job, step, error)
                return
            if not isinstance(error, GatewayError):
                raise
            reason = str(error)
            log.warning("job %s/%s: %s not delivered: %s", run.scope, run.job, step, reason)
            await self.apply(
                run.scope,
                run.job,
                lambda sequencer, current, now: sequencer.on_reply(
                    current, step, attempt, None, reason, now, delivered=False
                ),
            )
            return
        await self.runs.drop(run.scope, TimerEntry(run.job, step, attempt, TimerKind.SEND))

    async def report(self, run: Run) -> None:
        """Tell job control that the sequence holds or ended; an ended run is then closed."""
        control = self.gateway.job_control
        scope, job = run.scope, run.job
        stored_at = run.stored_at or None  # reports leave a job id stored again since alone
        if run.status is Status.HELD:
            # Refused when the job is no longer Running (the MES paused or aborted it): the MES
            # then decides, and reconciliation applies what it missed.
            await control.hold(scope, job, run.error or "a step failed", run=stored_at)
            await self.runs.mutate(scope, job, _hold_reported)
            return
        if run.status is not Status.FINISHING:
            return
        outcome = JobOutcome(
            results=[ProcessValue(id=name, value=value) for name, value in run.results.items()],
            error=run.error,
            side_effects=run.side_effects,
            correlation_id=run.failed_command,
        )
        if run.outcome is Outcome.COMPLETED:
            if not await report_completed(control, scope, job, outcome, run=stored_at):
                log.info(
                    "job %s/%s: its sequence completed as the MES paused it; reported when the "
                    "MES resumes it",
                    scope,
                    job,
                )
                return
        elif run.outcome is Outcome.FAILED:
            await control.abort(scope, job, outcome, run=stored_at)
        else:  # stopped or aborted by the MES: the job's state is set; the results so far
            await control.record_results(scope, job, outcome.results, run=stored_at)
        await self.runs.mutate(scope, job, _ended)
        log.info("job %s/%s: sequence %s", scope, job, run.outcome)


def _hold_reported(run: Run, now: float) -> Effects:
    if run.status is not Status.HELD or run.hold_reported:
        return Effects()
    run.hold_reported = True
    return Effects(changed=True)


def _ended(run: Run, now: float) -> Effects:
    if run.status is not Status.FINISHING:
        return Effects()
    run.status = Status.ENDED
    return Effects(changed=True)
