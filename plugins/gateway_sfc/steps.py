"""What one work entry does to its job: start the chart, apply a stimulus, send, report."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from gateway.equipment import EquipmentCommand
from gateway.errors import GatewayError, ValidationError
from gateway.jobstates import TopState
from gateway.recipes import JobCommand, JobOutcome, ProcessValue
from gateway.resilience import is_transient
from gateway_sfc.context import EngineContext
from gateway_sfc.engine import Timer, TimerKind
from gateway_sfc.events import EventRouter
from gateway_sfc.executions import ExecutionStore, mark_ended, timer_from_json
from gateway_sfc.snapshots import RecipeCache
from gateway_sfc.state import Execution, Phase, Status
from gateway_sfc.validation import load_chart

log = logging.getLogger(__name__)


class StepHandlers:
    """Handles one work entry of each kind (``kind`` field: start, reply, event, timer, ...)."""

    def __init__(
        self,
        context: EngineContext,
        executions: ExecutionStore,
        recipes: RecipeCache,
        events: EventRouter,
    ) -> None:
        self.context = context
        self.executions = executions
        self.recipes = recipes
        self.events = events

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
        elif kind == "reply":
            data = json.loads(fields.get("data") or "null")
            attempt = int(fields["attempt"])
            await mutate(
                scope,
                job,
                lambda ex, execution, now: ex.on_reply(
                    _noting_late_reply(execution, fields["action"], attempt),
                    fields["action"],
                    attempt,
                    data,
                    fields.get("error"),
                    now,
                ),
            )
        elif kind == "timer":
            timer = timer_from_json(fields["timer"])
            offline = await self._offline_reason(scope, job, timer)
            await mutate(
                scope, job, lambda ex, execution, now: ex.on_timer(execution, timer, now, offline)
            )
        elif kind == "command":
            command = JobCommand(fields["command"])
            await mutate(
                scope, job, lambda ex, execution, now: ex.on_command(execution, command, now)
            )
        elif kind == "resume":
            await mutate(scope, job, lambda ex, execution, now: ex.on_resume(execution, now))
        else:
            raise ValueError(f"unknown work entry kind {kind!r}")

    async def start(self, scope: str, job: str) -> None:
        control = self.context.gateway.job_control
        recipe_job = await control.job(scope, job)
        if recipe_job is None:
            log.warning("job %s/%s to start no longer exists", scope, job)
            return
        if not await control.run(scope, job):
            state = await control.state(scope, job)
            if state is None or TopState.of(state) is not TopState.RUNNING:  # revoked, aborted...
                log.info("job %s/%s not started: it is %s", scope, job, state)
                return
        try:
            chart = load_chart(recipe_job.recipe)
        except ValidationError as error:
            await control.abort(scope, job, JobOutcome(error=f"invalid recipe: {error}"))
            return
        parameters = recipe_job.parameters()
        await self.recipes.save(scope, job, recipe_job.recipe, parameters)
        executor = self.context.executor(chart, parameters)
        execution, effects = executor.start(scope, job, time.time())
        if await self.executions.create(execution, effects):
            log.info("job %s/%s: chart started at %s", scope, job, chart.initial)

    async def _offline_reason(self, scope: str, job: str, timer: Timer) -> str | None:
        """Why the equipment of a timed-out action is offline (``None``: online or unknown)."""
        if timer.kind not in (TimerKind.TIMEOUT, TimerKind.LIVENESS):
            return None
        snapshot = await self.recipes.get(scope, job)
        action = next((a for a in snapshot.chart.recipe.actions if a.name == timer.action), None)
        if action is None or not action.equipment:
            return None
        return await self.context.gateway.equipment.offline_reason(action.equipment)

    async def send(self, scope: str, job: str, action_name: str, attempt: int) -> None:
        execution = await self.executions.read(scope, job)
        if execution is None:
            return
        run = execution.actions.get(action_name)
        if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
            return  # cancelled or answered meanwhile
        snapshot = await self.recipes.get(scope, job)
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
            await self.context.gateway.equipment.send(command)
            self.context.metrics.commands.labels(command.type).inc()
        except GatewayError as error:
            if is_transient(error):
                raise  # the broker is away: sent again once it is back (same correlation id)
            # No driver, or the driver could not deliver: this try failed.
            log.warning("job %s/%s: %s not delivered: %s", scope, job, action_name, error)
            await self._fail_try(scope, job, action_name, attempt, str(error))

    async def _fail_try(self, scope: str, job: str, action: str, attempt: int, error: str) -> None:
        await self.executions.mutate(
            scope,
            job,
            lambda ex, execution, now: ex.on_reply(
                execution, action, attempt, None, error, now, delivered=False
            ),
        )

    async def report(self, scope: str, job: str) -> None:
        """Tell job control how the chart ended (or that it holds), then close the state."""
        execution = await self.executions.read(scope, job)
        if execution is None:
            return
        control = self.context.gateway.job_control
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
            correlation_id=_failed_command(execution),
        )
        if execution.outcome == "completed":
            await control.complete(scope, job, outcome)
        elif execution.outcome == "aborted":
            await control.abort(scope, job, outcome)
        else:  # stopped or aborted by the MES: the job's state is already set
            await control.record_results(scope, job, outcome.results)
        await self.executions.mutate(scope, job, mark_ended)
        self.context.metrics.charts.labels(execution.outcome or "unknown").inc()
        log.info("job %s/%s: chart %s", scope, job, execution.outcome)


def _noting_late_reply(execution: Execution, action: str, attempt: int) -> Execution:
    """Log a reply that comes after its try ended (timed out, retried, cancelled): it is
    taken off the work stream and changes nothing."""
    run = execution.actions.get(action)
    if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
        now = f"try {run.attempt} {run.phase.value}" if run is not None else "gone"
        log.info("reply to %s try %d came after that try ended (%s); ignored", action, attempt, now)
    return execution


def _failed_command(execution: Execution) -> str | None:
    """The correlation id of the command whose failure ended the chart, if one did."""
    for run in execution.actions.values():
        if run.phase is Phase.FAILED:
            return f"{execution.job}:{run.name}:{run.attempt}"
    return None
