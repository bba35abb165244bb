"""Job management: every OPC 40001-3 method and every recipe report, start to finish.

Each change goes the same way: decide and store it atomically (``repository``), then announce
it (status event, ``gateway_job_state_changed`` observers) and hand the job to or tell its
recipe interpreter (``start`` on entering AllowedToStart, ``command`` on Pause, Resume, Stop
and Abort once the interpreter has the job). What happens after the store cannot undo the
change: a failing publish or interpreter is logged, and the method still reports success,
because the state the MES asked for is what the station now holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

from gateway.equipment import EquipmentHub
from gateway.jobstates import JobState, StateFilter, TopState, matches
from gateway.recipes import JobCommand, RecipeInterpreter
from gateway.store import Store
from gateway_jobs.acceptance import Verdict, check_job_order
from gateway_jobs.config import StationConfig
from gateway_jobs.events import Cause, EventSink, status_event
from gateway_jobs.model import (
    JobOrder,
    JobOrderCall,
    JobOrderIDCall,
    JobResponseReply,
    JobResponsesReply,
    Outcome,
    ReturnStatus,
)
from gateway_jobs.repository import Change, Edit, JobRepository, Refusal, StoredJob, new_job
from gateway_jobs.settings import NO_LIMIT, JobsSettings
from gateway_jobs.states import job_state, next_state

log = logging.getLogger(__name__)

Observer = Callable[..., Any]  # gateway_job_state_changed(scope, job_order_id, method, ...)
_COMMANDS = {command.value: command for command in JobCommand}


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
        self.interpreters = interpreters
        self.settings = settings
        self.source = source
        self.events = events
        self.observe = observe
        self.observe_method = observe_method  # gateway_job_method_called(...)

    # -- MES methods ------------------------------------------------------------------------

    async def store(self, scope: str, method: str, call: JobOrderCall, cause: Cause) -> Outcome:
        """Store or StoreAndStart: a new job, if acceptable, never over an existing one."""
        order = call.job_order
        if await self.repository.exists(scope, order.job_order_id):
            return self._refused(Refusal("duplicate"), scope, order.job_order_id, method)
        verdict = await self._check(scope, order)
        if verdict.work_master is None:
            return Outcome(ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER, verdict.message)
        state = next_state(JobState.INITIAL, method)
        assert state is not None, f"{method} creates no job"
        job = new_job(order, state, verdict.work_master)
        result = await self.repository.create(scope, job, method, limit=await self._limit(scope))
        return await self._finish(scope, order.job_order_id, method, result, cause)

    async def update(self, scope: str, call: JobOrderCall, cause: Cause) -> Outcome:
        """Update: replace a job order that has not started, if the new one is acceptable."""
        order = call.job_order
        current = await self.repository.load(scope, order.job_order_id)
        if current is None:
            return self._refused(Refusal("unknown"), scope, order.job_order_id, "Update")
        if next_state(current.state, "Update") is None:  # before the checks: they would not help
            refusal = Refusal("invalid-state", state=current.state)
            return self._refused(refusal, scope, order.job_order_id, "Update")
        verdict = await self._check(scope, order)
        work_master = verdict.work_master
        if work_master is None:
            return Outcome(ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER, verdict.message)

        def replace_order(job: StoredJob) -> StoredJob:
            return job.with_work_master(order, work_master)

        result = await self.repository.transition(
            scope, order.job_order_id, "Update", replace_order
        )
        return await self._finish(scope, order.job_order_id, "Update", result, cause)

    async def act(self, scope: str, method: str, call: JobOrderIDCall, cause: Cause) -> Outcome:
        """Start, RevokeStart, Pause, Resume, Stop, Abort, Cancel or Clear."""
        result = await self.repository.transition(scope, call.job_order_id, method)
        return await self._finish(scope, call.job_order_id, method, result, cause)

    async def job_response(self, scope: str, job_order_id: str) -> JobResponseReply:
        """RequestJobResponseByJobOrderID."""
        job = await self.repository.load(scope, job_order_id)
        if job is None:
            return JobResponseReply(ReturnStatus.UNKNOWN_JOB_ORDER_ID)
        return JobResponseReply(ReturnStatus.NO_ERROR, job.response)

    async def job_responses(self, scope: str, wanted: StateFilter) -> JobResponsesReply:
        """RequestJobResponseByJobOrderState: a top-level state matches all its substates."""
        top = wanted if isinstance(wanted, TopState) else wanted.top
        responses = [
            response
            for response in await self.repository.responses_in_state(scope, top)
            if matches(job_state(response.job_state or []), wanted)
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
        self, scope: str, job_order_id: str, trigger: str, edit: Edit | None = None
    ) -> bool:
        """A transition a recipe interpreter reports; ``False`` when the state did not allow it."""
        result = await self.repository.transition(scope, job_order_id, trigger, edit)
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
        if trigger != "ResultUpdate":
            await self._announce(scope, result, None)
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
        try:
            await self.events.publish(scope, status_event(self.source, scope, change, cause))
        except Exception as error:  # stored already; the MES can query or read the publisher
            log.warning("status event of job %s/%s not sent: %s", scope, job.job_order_id, error)
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
        """Start the recipe, or pass the MES's command on to the interpreter running it."""
        call = _interpreter_call(change)
        if call is None:
            return
        job = change.after
        interpreter = self.interpreters.get(job.work_master.data_schema or "")
        if interpreter is None:
            log.error(
                "job %s/%s: no recipe interpreter for %r here; it will not run",
                scope,
                job.job_order_id,
                job.work_master.data_schema,
            )
            return
        try:
            if call == "start":
                await interpreter.start(job.recipe_job(scope))
            else:
                await interpreter.command(job.recipe_job(scope), call)
        except Exception:
            log.exception(
                "job %s/%s: recipe interpreter failed on %s",
                scope,
                job.job_order_id,
                change.trigger,
            )

    # -- helpers ----------------------------------------------------------------------------

    async def _check(self, scope: str, order: JobOrder) -> Verdict:
        default = self.settings.default_work_master
        return await check_job_order(self.config, scope, order, default_work_master=default)

    async def _limit(self, scope: str) -> int | None:
        """The scope's job limit (MES override, else the setting); ``None``: no limit."""
        override = await self.config.max_job_orders(scope)
        limit = self.settings.max_job_orders if override is None else override
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


def _interpreter_call(change: Change) -> JobCommand | Literal["start"] | None:
    """What the interpreter must hear of ``change``: start the job, a command, or nothing."""
    if change.trigger in ("Start", "StoreAndStart"):
        return "start"
    command = _COMMANDS.get(change.trigger)
    before = change.before
    # The interpreter has the job from AllowedToStart on: an Abort before concerns only us.
    if command is None or before is None or before.state.top is TopState.NOT_ALLOWED_TO_START:
        return None
    return command
