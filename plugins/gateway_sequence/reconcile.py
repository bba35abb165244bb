"""What a crash interrupted, repaired from what Redis and job control say (periodically).

- a job waiting in AllowedToStart whose hand-off was lost (a crash between its state change and
  ``start``) is started;
- a run stored but not begun (``starting``) is begun, or closed when its job is gone;
- a run whose end or hold was stored but not reported to job control is reported;
- an MES command lost between the job's state change and ``command`` is applied
  (``gateway.recipes.missed_command``).

Every repair is a stimulus like any other: applying it twice, or on two instances at once,
changes nothing more than applying it once.
"""

from __future__ import annotations

import logging

from gateway.jobstates import TopState
from gateway.logs import log_context
from gateway.recipes import JobCommand, RecipeJob, missed_command
from gateway_sequence.engine import SequenceEngine
from gateway_sequence.model import DATASCHEMA
from gateway_sequence.state import Run, Status

log = logging.getLogger(__name__)


async def reconcile(engine: SequenceEngine) -> None:
    control = engine.gateway.job_control
    await engine.drop_ended_legacy_scopes()
    for scope in sorted(await engine.store.known_scopes()):
        for job in await control.startable(scope):
            recipe_job = await control.job(scope, job)
            if recipe_job is None or recipe_job.dataschema != DATASCHEMA:
                continue
            run = await engine.runs.read(scope, job)
            if run is not None and not of_an_earlier_order(run, recipe_job):
                continue  # its run is repaired below
            log.info("job %s/%s waits in AllowedToStart: starting it", scope, job)
            await engine.start(recipe_job)
    for scope in await engine.scopes():
        for job in await engine.runs.active(scope):
            run = await engine.runs.read(scope, job)
            if run is not None:
                with log_context(scope=scope, job=job):
                    await repair(engine, run)


async def repair(engine: SequenceEngine, run: Run) -> None:
    scope, job = run.scope, run.job
    control = engine.gateway.job_control
    state = await control.state(scope, job)
    if run.status is Status.STARTING:
        top = state.top if state is not None else TopState.END
        # AllowedToStart only once its turn came (start revoked, then queued again: it waits).
        if top is TopState.RUNNING or (
            top is TopState.ALLOWED_TO_START and job in await control.startable(scope)
        ):
            log.info("job %s/%s: its sequence was stored, not begun; beginning it", scope, job)
            await engine.begin(scope, job)
        elif top not in (TopState.NOT_ALLOWED_TO_START, TopState.ALLOWED_TO_START):
            await engine.command(scope, job, JobCommand.ABORT)  # aborted, ended or gone
        return
    if run.status is Status.FINISHING or (run.status is Status.HELD and not run.hold_reported):
        log.info("job %s/%s: reporting the sequence's %s again", scope, job, run.status)
        await engine.report(run)
        return
    command = missed_command(state, paused=run.status is not Status.RUNNING)
    if command is not None:
        log.info("job %s/%s: the sequence missed %s; applying it", scope, job, command)
        await engine.command(scope, job, command)


def of_an_earlier_order(run: Run, job: RecipeJob) -> bool:
    """Whether ``run`` is of a job order stored before ``job`` under the same id (the MES
    cleared it and stored the id again): ``job`` then has no run yet."""
    return bool(run.stored_at and job.stored_at and run.stored_at != job.stored_at)
