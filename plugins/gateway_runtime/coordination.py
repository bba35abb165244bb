"""Running recipes on several instances at once, sharing nothing but Redis.

``Coordinator`` wires the parts and is what the interpreter and the equipment hub talk to:

- ``keys``: where everything is kept (the key layout is documented there);
- ``scopes``: the scopes this instance works for, and job -> scope;
- ``work`` / ``consumer``: adding to and taking from the per-scope work streams, timers;
- ``executions``: compare-and-swap of a job's execution state with everything committed with it;
- ``snapshots``: the program each job runs, compiled by its format and cached;
- ``memory``: what is cached of each job, bounded by the jobs in progress, forgotten at its end;
- ``steps``: what each kind of work entry does;
- ``events``: equipment events to the actions waiting for them;
- ``reconcile``: what a crash lost, repaired at start and periodically;
- ``resend``: commands sent again to equipment that came back online.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gateway.equipment import CorrelationId, EquipmentEvent, EquipmentReply
from gateway.errors import NotPermitted
from gateway.formats import Execution, RecipeFormat
from gateway.logs import log_context
from gateway.recipes import JobCommand, RecipeJob
from gateway_runtime.breakpoints import Breakpoints
from gateway_runtime.consumer import WorkConsumer
from gateway_runtime.context import EngineContext
from gateway_runtime.editing import StepEdits
from gateway_runtime.events import EventRouter, event_fields
from gateway_runtime.executions import ExecutionStore
from gateway_runtime.keys import GROUP
from gateway_runtime.memory import JobMemory
from gateway_runtime.reconcile import Reconciler
from gateway_runtime.resend import Resender
from gateway_runtime.scopes import ScopeRegistry
from gateway_runtime.settings import RuntimeSettings
from gateway_runtime.snapshots import RecipeCache
from gateway_runtime.steps import StepHandlers
from gateway_runtime.work import WorkQueue

if TYPE_CHECKING:
    from gateway.jobmethods import JobMethods
    from gateway.phases import InterpreterPhase

log = logging.getLogger(__name__)


class Coordinator:
    """The runtime's Redis side: the interpreters' and the equipment hub's counterpart."""

    def __init__(
        self,
        settings: RuntimeSettings,
        gateway: InterpreterPhase,
        formats: Mapping[str, RecipeFormat],
    ) -> None:
        self.context = context = EngineContext(settings, gateway, formats)
        self.scopes = ScopeRegistry(context)
        self.memory = JobMemory(context, self.scopes)
        self.recipes = RecipeCache(context, self.memory)
        self.executions = ExecutionStore(context, self.recipes, self.memory)
        self.events = EventRouter(context, self.executions, self.recipes, self.scopes)
        self.executions.wait_started = self.events.claim_unclaimed
        self.breakpoints = Breakpoints(context, self.executions)
        self.steps = StepHandlers(
            context, self.scopes, self.executions, self.recipes, self.events, self.breakpoints
        )
        self.edits = StepEdits(context, self.executions, self.recipes, self.breakpoints)
        self.work = WorkQueue(context, self.scopes)
        self.consumer = WorkConsumer(context, self.scopes, self.steps.handle)
        self.executions.committed = self.steps.publish
        self.executions.due_at = self.consumer.due_at
        self.reconciler = Reconciler(
            context, self.scopes, self.executions, self.work, self.breakpoints
        )
        self.resender = Resender(context, self.scopes, self.executions, self.recipes, self.work)
        context.metrics.sample_streams(gateway.metrics, self._group_info)
        self._handlers: TaskGroup | None = None  # while the engine runs: work done here
        # Starts and reports made here at once, at most (as many as work entries: a burst of
        # admissions waits here rather than opening a connection each).
        self._in_place: anyio.Semaphore | None = None

    @property
    def settings(self) -> RuntimeSettings:
        return self.context.settings

    async def _group_info(self) -> dict[str, dict[str, Any]]:
        """The consumer group's figures per scope (pending, lag) for the metrics."""
        info: dict[str, dict[str, Any]] = {}
        for scope in list(self.scopes.scopes):
            for group in await self.context.client.xinfo_groups(self.context.keys.work(scope)):
                if group.get("name") == GROUP:
                    info[scope] = group
        return info

    # -- entry points (interpreter and equipment sink) --------------------------------------

    async def start_job(self, job: RecipeJob) -> None:
        """Start the job here, where it was admitted: no work entry to write and read back.
        In the background, so the dispatcher's pass does not wait for it. A crash before its
        create leaves the job admitted (in AllowedToStart, or Running if its Run committed)
        with no execution, which reconciliation starts. With no runtime running here (an
        instance of another role), an engine instance takes it from the work stream."""
        handlers = self._handlers
        if handlers is None:
            await self.work.start(job.scope, job.job_order_id)
            return
        handlers.start_soon(self._start_here, job.scope, job.job_order_id)

    async def _start_here(self, scope: str, job: str) -> None:
        assert self._in_place is not None
        async with self._in_place:
            await self._start_in_place(scope, job)

    async def _start_in_place(self, scope: str, job: str) -> None:
        with log_context(scope=scope, job=job):
            try:
                if scope not in self.scopes.scopes:
                    await self.scopes.adopt(scope, announce=True)
                await self.steps.start(scope, job)
            except Exception as error:
                # The work stream tries again (with backoff, on any instance); if even that
                # fails, reconciliation starts the job.
                log.info("job %s/%s: start handed to the work stream (%s)", scope, job, error)
                try:
                    await self.work.start(scope, job)
                except Exception:
                    log.exception("job %s/%s: start left to reconciliation", scope, job)

    def _report_soon(self, execution: Execution) -> None:
        """``ExecutionStore.report_here``: the end just committed, reported in the background
        (the commit's caller, an equipment reply say, goes on)."""
        if self._handlers is None:  # stopping: reconciliation reports it
            return
        self._handlers.start_soon(self._report_here, execution)

    async def _report_here(self, execution: Execution) -> None:
        assert self._in_place is not None
        async with self._in_place:
            await self._report_in_place(execution)

    async def _report_in_place(self, execution: Execution) -> None:
        scope, job = execution.scope, execution.job
        with log_context(scope=scope, job=job):
            try:
                await self.steps.report(scope, job, execution)
            except Exception as error:
                # The work stream tries again (with backoff, reading the state again); if
                # even that fails, reconciliation reports the end.
                log.info("job %s/%s: report handed to the work stream (%s)", scope, job, error)
                try:
                    await self.work.report(scope, job)
                except Exception:
                    log.exception("job %s/%s: report left to reconciliation", scope, job)

    async def command_job(self, job: RecipeJob, command: JobCommand) -> None:
        if command is JobCommand.ABORT:
            try:
                await self.steps.hold_for_rollback(job.scope, job.job_order_id)
            except Exception:  # the abort itself must not be lost over it
                log.exception(
                    "job %s/%s: equipment not held for its rollback", job.scope, job.job_order_id
                )
        await self.work.command(job.scope, job.job_order_id, command, job.stored_at)

    async def reply(self, reply: EquipmentReply) -> None:
        """Apply a reply where it arrives: one commit, then the next command goes out.

        Returns once the reply's effect is stored (the message may be acknowledged then); a
        store failure propagates, so the message is not acknowledged and comes again.
        """
        target = await self._reply_target(reply)
        if target is not None:
            await self._apply(reply, *target)

    async def checked_reply(self, reply: EquipmentReply) -> None:
        """``gateway.equipment.ReplierCheck``: ``reply`` if its sender is the equipment the job's
        snapshot binds the action to (where the command went); ``NotPermitted`` otherwise.
        Whether the try still waits is the commit's to check: a reply to a try that ended is
        recorded and ignored. An action bound to no equipment (a driver serving its type
        decided) was sent with the hub's record, and is checked against it."""
        hub = self.context.gateway.equipment
        target = await self._reply_target(reply)
        if target is None:
            await hub.check_replier(reply)  # none is waiting: refused when it names a sender
            return
        scope, job, action, _ = target
        try:
            bound = await self._bound_equipment(scope, job, action, reply.equipment)
        except (ValueError, KeyError):  # no such job or action any more: nothing waits
            await hub.check_replier(reply)
            return
        if bound is None:
            await hub.check_replier(reply)
            await self._apply(reply, *target)
            await hub.forget_command(reply.correlation_id)
            return
        if reply.equipment is not None and reply.equipment != bound:
            raise NotPermitted(
                f"equipment {reply.equipment} may not answer command {reply.correlation_id}: "
                f"it went to {bound}"
            )
        await self._apply(reply, *target)

    async def _bound_equipment(
        self, scope: str, job: str, action: str, sender: str | None
    ) -> str | None:
        """The equipment the job's snapshot binds ``action`` to. The snapshot kept in memory
        may be of an earlier run of the job id (started again on another instance): when it
        names another sender, the stored one decides."""
        try:
            bound = (await self.recipes.get(scope, job)).action(action).equipment
        except KeyError:  # an action an edit added, here kept from before the edit
            bound = (await self.recipes.read(scope, job)).action(action).equipment
        if sender is not None and sender != bound:
            self.recipes.forget(scope, job)
            bound = (await self.recipes.get(scope, job)).action(action).equipment
        return bound

    async def _reply_target(self, reply: EquipmentReply) -> tuple[str, str, str, int] | None:
        """Scope, job, action and attempt of the try ``reply`` answers (``None``: not ours)."""
        correlation = CorrelationId.parse(reply.correlation_id)  # checked by the hub
        job = correlation.job
        scope = reply.scope or await self.scopes.job_scope(job)
        if not scope:
            log.info("reply %s for unknown job %s ignored", reply.correlation_id, job)
            return None
        return scope, job, correlation.step, correlation.attempt

    async def _apply(
        self, reply: EquipmentReply, scope: str, job: str, action: str, attempt: int
    ) -> None:
        if scope not in self.scopes.scopes:
            await self.scopes.adopt(scope, announce=True)
        with log_context(scope=scope, job=job, correlationid=reply.correlation_id):
            await self.steps.reply(scope, job, action, attempt, reply.data, reply.error)

    async def event(self, event: EquipmentEvent) -> None:
        """Give an event to the job waiting for it, where it arrives (see ``reply``). An event
        that names its equipment but no job is the job's that holds the equipment (see
        ``gateway_runtime.events``); from equipment no job holds, it is kept for no one."""
        fields = event_fields(event)
        scope, held = event.scope, True
        if event.job_order_id is None and event.equipment is not None:
            holder = await self.events.holder(event.equipment, scope)
            if holder is not None:
                scope, fields["job_order_id"] = holder
                log.debug("event %s (%s) of %s: job %s holds it", event.id, event.type, *holder)
            held = holder is not None
        elif scope is None and event.job_order_id:
            scope = await self.scopes.job_scope(event.job_order_id)
        if scope is None:
            scope = await self.events.scope_waiting_for(event)
        if scope is None:
            self._dropped(event, "not_held" if not held else "no_job")
            return
        if scope not in self.scopes.scopes:
            await self.scopes.adopt(scope, announce=True)
        if not await self.events.route(scope, fields, keep=held):
            self._dropped(event, "not_held")

    def _dropped(self, event: EquipmentEvent, reason: str) -> None:
        self.context.metrics.events_dropped.labels(reason).inc()
        if reason == "not_held":  # equipment reporting between jobs: routine, not news
            log.debug(
                "event %s (%s) of %s: no job holds that equipment or waits for it; dropped",
                event.id,
                event.type,
                event.equipment,
            )
        else:
            log.info("event %s (%s) arrived where no job runs; dropped", event.id, event.type)

    async def equipment_online(self, equipment_id: str) -> None:
        """``gateway.equipment.OnlineObserver``: commands it may have missed go out again."""
        await self.resender.equipment_back(equipment_id)

    # -- the service ------------------------------------------------------------------------

    async def run(
        self, *, task_status: TaskStatus[None], methods: JobMethods | None = None
    ) -> None:
        """Run the engine's loops until the gateway stops; ``methods``: the job methods whose
        status events say when a job ends (``None``: none are built, the caches' limit alone
        bounds them)."""
        settings = self.settings
        self.scopes.start()
        self.consumer.start()
        self.executions.start()
        self.events.start()
        self._in_place = anyio.Semaphore(settings.max_concurrent_items)
        await self.scopes.adopt_known()
        await self.reconciler.recovery_scan()
        await self.reconciler.reconcile()
        task_status.started()
        # Leaving the block stops the loops first, then lets the entries in hand finish
        # (unfinished ones stay pending in the group and another instance claims them).
        try:
            async with anyio.create_task_group() as handlers, anyio.create_task_group() as loops:
                self._handlers = handlers
                self.executions.report_here = self._report_soon
                resilience = self.context.gateway.resilience
                loops.start_soon(self.consumer.read_loop, handlers)
                # Each loop survives store outages under a readiness check of its own (logged
                # once per outage, /readyz 503 naming it meanwhile; gateway.resilience).
                loops.start_soon(resilience.forever, "recipe-runtime.timers", self.consumer.timers)
                loops.start_soon(
                    resilience.every,
                    "recipe-runtime.claims",
                    settings.claim_idle_seconds / 2,
                    lambda: self.consumer.claim_orphans(handlers),
                )
                loops.start_soon(
                    resilience.every,
                    "recipe-runtime.scopes",
                    settings.scope_poll_seconds,
                    self.scopes.discover,
                )
                loops.start_soon(
                    resilience.every,
                    "recipe-runtime.reconcile",
                    settings.reconcile_seconds,
                    self.reconciler.reconcile,
                )
                loops.start_soon(
                    resilience.every,
                    "recipe-runtime.memory",
                    settings.reconcile_seconds,
                    self.memory.resize,
                )
                if methods is not None:
                    loops.start_soon(self.memory.follow, methods)
                # Well within the time a command may stay unconfirmed before it is sent again;
                # mostly the commit of its reply has dropped it from the outbox already.
                loops.start_soon(
                    resilience.every,
                    "recipe-runtime.outbox",
                    max(settings.timer_poll_seconds, settings.outbox_grace_seconds / 5),
                    self.steps.flush_published,
                )
                await self.context.gateway.stopping.wait()
                loops.cancel_scope.cancel()
        finally:
            self._handlers = None
            self.executions.report_here = None
