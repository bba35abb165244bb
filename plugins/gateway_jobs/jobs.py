"""Job management: every OPC 40001-3 method and every recipe report, start to finish.

Each change goes the same way: decide and store it atomically (``repository``), then announce
it (status event, ``gateway_job_state_changed`` observers), tell the interpreter the MES's
Pause, Resume, Stop and Abort once it has the job (``command``), and ask the dispatcher for a
pass that starts what may start now (a job entering AllowedToStart waits in the scope's queue,
see ``queue``; the dispatcher hands it to its interpreter's ``start`` when its turn comes). The
MES has its reply once the change is stored and announced: the pass runs after it, in the
background (``Dispatcher.request``). What happens after the store cannot undo the change: a
failing publish or interpreter is logged, and the method still reports success, because the
state the MES asked for is what the station now holds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from gateway.changes import Trigger
from gateway.equipment import EquipmentHub
from gateway.jobstates import JobState, StateFilter, TopState, matches
from gateway.recipes import JobCommand, RecipeInterpreter, equipment_uses
from gateway.routing import recipe_equipment
from gateway.store import ScopeTransaction, Store
from gateway_jobs.acceptance import Verdict, check_job_order, named_work_masters
from gateway_jobs.config import JOB_ACCEPTANCE, ONLINE, ConfigSnapshot, StationConfig
from gateway_jobs.dispatcher import Dispatcher
from gateway_jobs.events import Cause, EventSink, StatusEvents, status_event
from gateway_jobs.model import (
    JobAcceptance,
    JobOrder,
    JobOrderCall,
    JobOrderIDCall,
    JobResponseReply,
    JobResponsesReply,
    Outcome,
    ReturnStatus,
)
from gateway_jobs.queue import HOLDING, entry_json, with_position
from gateway_jobs.repository import Admission, Change, Edit, JobRepository, Refusal
from gateway_jobs.settings import NO_LIMIT, JobsSettings
from gateway_jobs.states import job_state, next_state
from gateway_jobs.stored import StoredJob, new_job, required_equipment

log = logging.getLogger(__name__)

Observer = Callable[..., Any]  # gateway_job_state_changed(scope, job_order_id, method, ...)
_COMMANDS = {command.value: command for command in JobCommand}
_ENDS = frozenset({JobCommand.STOP.value, JobCommand.ABORT.value})


class JobManager:
    """The job management of one gateway (one store, one set of interpreters)."""

    def __init__(
        self,
        *,
        store: Store,
        interpreters: Mapping[str, RecipeInterpreter],
        settings: JobsSettings,
        source: str,
        events: EventSink,
        observe: Observer,
        observe_method: Observer = lambda **_: None,
        equipment: EquipmentHub | None = None,
    ) -> None:
        """``equipment``: the hub recipes are routed against (``None``: routing unchecked)."""
        self.repository = JobRepository(store, retry_limit=settings.retry_limit)
        self.config = StationConfig(store, interpreters, equipment)
        self.hub = equipment
        self.dispatcher = Dispatcher(
            store,
            capacity=settings.max_running_job_orders,
            start=self._start_admitted,
            release_delay=settings.dispatch_release_delay_ms / 1000,
        )
        self.dispatcher.adopt = self.adopt
        self.interpreters = interpreters
        self.settings = settings
        self.source = source
        self.events = StatusEvents(events)
        self.observe = observe
        self.observe_method = observe_method  # gateway_job_method_called(...)

    # -- MES methods ------------------------------------------------------------------------

    async def store(self, scope: str, method: str, call: JobOrderCall, cause: Cause) -> Outcome:
        """Store or StoreAndStart: a new job, if acceptable, never over an existing one."""
        order = call.job_order
        trigger = Trigger(method)
        state = next_state(JobState.INITIAL, trigger)
        assert state is not None, f"{method} creates no job"
        work_master_ids = named_work_masters(order)
        # The configuration checked is watched with the job (read, or remembered): a change to
        # it before the commit makes the Store decide again.
        reads = self.config.snapshot_keys(scope, work_master_ids)

        async def admit(transaction: ScopeTransaction) -> Admission | Refusal:
            documents = await transaction.get_json_many(reads)
            known = self.config.snapshot_of(work_master_ids, documents)
            verdict = await self._check(scope, order, known)
            if verdict.work_master is None:
                return Refusal("unacceptable", message=verdict.message)
            job = new_job(order, state, verdict.work_master)
            limit = self._limit(known.acceptance)
            return Admission(job, limit, equipment=await self.equipment(scope, job))

        result = await self.repository.create(
            scope,
            order.job_order_id,
            trigger,
            admit,
            reads=reads,
        )
        return await self._finish(scope, order.job_order_id, method, result, cause)

    async def update(self, scope: str, call: JobOrderCall, cause: Cause) -> Outcome:
        """Update: replace a job order that has not started, if the new one is acceptable."""
        order = call.job_order
        current = await self.repository.load(scope, order.job_order_id)
        if current is None:
            return self._refused(Refusal("unknown"), scope, order.job_order_id, "Update")
        if (
            next_state(current.state, Trigger.UPDATE) is None
        ):  # before the checks: they would not help
            refusal = Refusal("invalid-state", state=current.state)
            return self._refused(refusal, scope, order.job_order_id, "Update")
        known = await self.config.snapshot(scope, named_work_masters(order))
        verdict = await self._check(scope, order, known)
        work_master = verdict.work_master
        if work_master is None:
            return Outcome(ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER, verdict.message)

        def replace_order(job: StoredJob) -> StoredJob:
            return job.with_work_master(order, work_master)

        equipment = await self.equipment(scope, replace_order(current))
        held = await self.dispatcher.admitted_equipment(scope, order.job_order_id)
        if held is not None and equipment != held:
            # Let start with the equipment it holds: another job may be let start on what it
            # would use now, and both would command it.
            return Outcome(
                ReturnStatus.INVALID_JOB_ORDER_STATUS,
                f"invalid-state: job order {order.job_order_id!r} was let start holding "
                f"{', '.join(held) or 'no equipment'}; an Update may not change that "
                "(RevokeStart it first)",
            )
        result = await self.repository.transition(
            scope, order.job_order_id, Trigger.UPDATE, replace_order, equipment=equipment
        )
        return await self._finish(scope, order.job_order_id, "Update", result, cause)

    async def act(
        self,
        scope: str,
        method: str,
        call: JobOrderIDCall,
        cause: Cause,
        described: Edit | None = None,
    ) -> Outcome:
        """Start, RevokeStart, Pause, Resume, Stop, Abort, Cancel or Clear; ``described``: an
        edit of the Job Response made with the change (why, for a request on the MES's behalf)."""
        equipment = None
        if method == "Start":  # it enters the queue: what will it hold when it runs?
            job = await self.repository.load(scope, call.job_order_id)
            equipment = None if job is None else await self.equipment(scope, job)
        edit = _awaiting_results(self.settings.results_wait_seconds) if method in _ENDS else None
        if described is not None:
            edit = described if edit is None else _both(edit, described)
        result = await self.repository.transition(
            scope, call.job_order_id, Trigger(method), edit, equipment=equipment
        )
        return await self._finish(scope, call.job_order_id, method, result, cause)

    async def release_overdue_results(self, scope: str) -> None:
        """Make final the Job Responses whose recipe results did not come in time."""
        for job in await self.repository.results_overdue(scope, time.time()):
            log.warning(
                "job %s/%s: its recipe reported no results within %g s of the MES ending it; "
                "its Job Response is final without them",
                scope,
                job,
                self.settings.results_wait_seconds,
            )
            if not await self.drive(scope, job, Trigger.RESULT_UPDATE, results_received):
                await self.repository.forget_results_due(scope, job)  # cleared meanwhile

    async def job_response(self, scope: str, job_order_id: str) -> JobResponseReply:
        """RequestJobResponseByJobOrderID."""
        job = await self.repository.load(scope, job_order_id)
        if job is None:
            return JobResponseReply(ReturnStatus.UNKNOWN_JOB_ORDER_ID)
        response = job.response
        if job.state.top is TopState.ALLOWED_TO_START:
            position = (await self.dispatcher.queue(scope)).position(job_order_id)
            if position is not None:  # read now, never stored: it changes as others move
                response = with_position(response, position)
        return JobResponseReply(ReturnStatus.NO_ERROR, response)

    async def job_responses(self, scope: str, wanted: StateFilter) -> JobResponsesReply:
        """RequestJobResponseByJobOrderState: a top-level state matches all its substates."""
        top = wanted if isinstance(wanted, TopState) else wanted.top
        responses = [
            response
            for response in await self.repository.responses_in_state(scope, top)
            if matches(job_state(response.job_state or []), wanted)
        ]
        if top is TopState.ALLOWED_TO_START and responses:  # queued ones: where they stand
            view = await self.dispatcher.queue(scope)
            responses = [
                response
                if (position := view.position(response.job_order_id or "")) is None
                else with_position(response, position)
                for response in responses
            ]
        return JobResponsesReply(ReturnStatus.NO_ERROR, responses)

    def method_called(
        self,
        scope: str,
        job_order_id: str | None,
        method: str,
        outcome: Outcome,
        *,
        requested_by: str,
    ) -> None:
        """Tell ``gateway_job_method_called`` observers how a method call on a job was answered."""
        if job_order_id is None:
            return
        try:
            self.observe_method(
                scope=scope,
                job_order_id=job_order_id,
                method=method,
                status=outcome.status.name,
                message=outcome.message,
                requested_by=requested_by,
            )
        except Exception:
            log.exception("a gateway_job_method_called observer failed")

    # -- the recipe side (JobControl) -------------------------------------------------------

    async def drive(
        self,
        scope: str,
        job_order_id: str,
        trigger: Trigger,
        edit: Edit | None = None,
        *,
        run: str | None = None,
    ) -> bool:
        """A transition a recipe interpreter reports; ``False`` when the state did not allow it
        (or the job order is not the one stored at ``run``)."""
        result = await self.repository.transition(scope, job_order_id, trigger, edit, run=run)
        if isinstance(result, Refusal):
            log.info(
                "job %s/%s: %s refused (%s%s)",
                scope,
                job_order_id,
                trigger,
                result.kind,
                f", state {result.state}" if result.state else "",
            )
            return False
        if trigger.changes_state:
            await self._announce(scope, result, None)
            await self._dispatch_after(scope, result)
        return True

    # -- after a change ---------------------------------------------------------------------

    async def _finish(
        self,
        scope: str,
        job_order_id: str,
        method: str,
        result: Change | Refusal,
        cause: Cause,
    ) -> Outcome:
        if isinstance(result, Refusal):
            return self._refused(result, scope, job_order_id, method)
        await self._announce(scope, result, cause)
        await self._hand_off(scope, result)
        await self._dispatch_after(scope, result)
        return Outcome(ReturnStatus.NO_ERROR)

    async def _announce(self, scope: str, change: Change, cause: Cause | None) -> None:
        job = change.after
        log.info(
            "job %s/%s: %s %s -> %s",
            scope,
            job.job_order_id,
            change.trigger,
            change.previous_state,
            job.state,
        )
        await self.events.announce(scope, status_event(self.source, scope, change, cause))
        try:
            self.observe(
                scope=scope,
                job_order_id=job.job_order_id,
                method=change.trigger,
                previous=change.previous_state,
                current=job.state,
            )
        except Exception:
            log.exception("a gateway_job_state_changed observer failed")

    async def _hand_off(self, scope: str, change: Change) -> None:
        """Pass the MES's command on to the interpreter running the job."""
        command = _interpreter_call(change)
        if command is not None:
            await self._tell(scope, change.after, command, change.trigger)

    async def _start_admitted(self, scope: str, job_order_id: str) -> None:
        """The dispatcher let the job start: hand it to its interpreter.

        The job as this process remembers it will do when it is in AllowedToStart (it just
        left the queue, which only such jobs are in): the interpreter takes only its scope and
        id (and its format, which names the same runtime for every format), and reads the job
        itself. Remembered otherwise (or not at all), it is read: it may have been let start
        after another instance's Start this process has not seen."""
        job = self.repository.remembered(scope, job_order_id)
        if job is None or TopState.of(job.state) is not TopState.ALLOWED_TO_START:
            job = await self.repository.load(scope, job_order_id)
        if job is not None and TopState.of(job.state) is TopState.ALLOWED_TO_START:
            await self._tell(scope, job, "start", "dispatch")

    async def _tell(
        self, scope: str, job: StoredJob, call: JobCommand | Literal["start"], why: str
    ) -> None:
        interpreter = self.interpreters.get(job.recipe_schema or "")
        if interpreter is None:
            log.error(
                "job %s/%s: no recipe interpreter for %r here; it will not run",
                scope,
                job.job_order_id,
                job.recipe_schema,
            )
            return
        try:
            if call == "start":
                await interpreter.start(job.recipe_job(scope))
            else:
                await interpreter.command(job.recipe_job(scope), call)
        except Exception:
            log.exception(
                "job %s/%s: recipe interpreter failed on %s", scope, job.job_order_id, why
            )

    async def _dispatch_after(self, scope: str, change: Change) -> None:
        """Let queued jobs start when ``change`` may allow it (the job entered or left the
        queue, or freed its slot and equipment).

        The pass runs after the caller's reply (``Dispatcher.request``). Should this process die
        before it ran, nothing is lost: the change committed the queue entry or the release with
        the state, and the periodic pass of every instance (``DispatchService``, each
        ``dispatch_poll_seconds``, and at start) dispatches every known scope."""
        before = change.previous_state.top
        after = change.after.state.top
        # A job leaving the queue for Running or Interrupted was let start: it keeps its slot
        # and equipment, and frees nothing (the periodic pass covers a job run unadmitted).
        if after is TopState.ALLOWED_TO_START:
            await self.dispatcher.request(scope)
        elif before in HOLDING and after not in HOLDING:
            await self.dispatcher.request(scope, released=True)

    async def configure(self, scope: str, kind: str, method: str, data: Any) -> Outcome:
        """Apply a configuration event; a new capacity or online state may let jobs start."""
        outcome = await self.config.apply(scope, kind, method, data)
        if outcome.ok and kind in (JOB_ACCEPTANCE, ONLINE):
            await self.dispatcher.request(scope)
        return outcome

    async def adopt(self, scope: str, unqueued: Sequence[str]) -> None:
        """Queue those of the scope's jobs in AllowedToStart that have no queue entry (the
        periodic dispatch pass finds them): stored by a version of the gateway without the
        queue. A job that moved on meanwhile leaves an entry the next periodic pass drops (it
        checks entries against the states)."""
        for job_order_id in unqueued:
            job = await self.repository.load(scope, job_order_id)
            if job is None or job.state.top is not TopState.ALLOWED_TO_START:
                continue
            log.info(
                "job %s/%s: in AllowedToStart without a place in the queue; queued",
                scope,
                job_order_id,
            )
            entry = entry_json(
                job.priority, job.job_order.start_time, await self.equipment(scope, job)
            )
            await self.dispatcher.enqueue(scope, job_order_id, entry)

    async def equipment(self, scope: str, job: StoredJob) -> list[str]:
        """What the job holds while it runs: its EquipmentRequirements and the equipment its
        recipe talks to, actions routed by type included (``gateway.routing``)."""
        if not self.settings.equipment_allocation:
            return []
        needed = set(required_equipment(job))
        interpreter = self.interpreters.get(job.recipe_schema or "")
        uses = equipment_uses(interpreter, job.recipe)
        if self.hub is None:
            needed.update(use.equipment for use in uses if use.equipment)
        else:
            needed.update(await recipe_equipment(self.hub, scope, uses))
        return sorted(needed)

    # -- helpers ----------------------------------------------------------------------------

    async def _check(self, scope: str, order: JobOrder, known: ConfigSnapshot) -> Verdict:
        default = self.settings.default_work_master
        return await check_job_order(
            self.config, scope, order, default_work_master=default, known=known
        )

    def max_downloadable(self, acceptance: JobAcceptance) -> int:
        """The jobs a scope may hold (MES override, else the setting); ``NO_LIMIT``: any."""
        override = acceptance.max_downloadable_job_orders
        return self.settings.max_job_orders if override is None else override

    def _limit(self, acceptance: JobAcceptance) -> int | None:
        """The scope's job limit; ``None``: no limit."""
        limit = self.max_downloadable(acceptance)
        return None if limit >= NO_LIMIT else limit

    @staticmethod
    def _refused(refusal: Refusal, scope: str, job_order_id: str, method: str) -> Outcome:
        if refusal.kind == "unknown":
            return Outcome(
                ReturnStatus.UNKNOWN_JOB_ORDER_ID,
                f"unknown: no job order {job_order_id!r} in scope {scope!r}",
            )
        if refusal.kind == "invalid-state":
            return Outcome(
                ReturnStatus.INVALID_JOB_ORDER_STATUS,
                f"invalid-state: {method} is not allowed in state {refusal.state} "
                f"(job order {job_order_id!r})",
            )
        if refusal.kind == "unacceptable":
            return Outcome(ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER, refusal.message)
        if refusal.kind == "duplicate":
            return Outcome(
                ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER,
                f"duplicate: job order {job_order_id!r} exists in scope {scope!r}; "
                "Store never overwrites (Update changes a job that has not started)",
            )
        return Outcome(
            ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER,
            f"max_job_orders: scope {scope!r} holds its maximum of {refusal.limit} job orders",
        )


def _interpreter_call(change: Change) -> JobCommand | None:
    """The command the interpreter must hear of ``change`` (starting is the dispatcher's)."""
    command = _COMMANDS.get(change.trigger)
    before = change.before
    # The interpreter has the job from AllowedToStart on: an Abort before concerns only us.
    if command is None or before is None or before.state.top is TopState.NOT_ALLOWED_TO_START:
        return None
    return command


def _both(first: Edit, second: Edit) -> Edit:
    return lambda job: second(first(job))


def _awaiting_results(seconds: float) -> Edit:
    """The MES's Stop or Abort: a job whose recipe ran (it has been Running) waits for the
    results its recipe collected before its Job Response is final (``has_result``)."""

    def edit(job: StoredJob) -> StoredJob:
        ran = job.response.start_time is not None
        if not (ran and job.state.final and seconds > 0):
            return job
        return dataclasses.replace(job, results_due=time.time() + seconds)

    return edit


def results_received(job: StoredJob) -> StoredJob:
    """The recipe's results are in (or awaited no longer): the Job Response is final."""
    return dataclasses.replace(job, results_due=None)
