"""The hand-off between job management and recipe interpreters.

Job management (the OPC 40001-3 state machine) owns the job's state; a recipe interpreter owns
the execution of the Work Master's recipe. They meet here, so neither imports the other:

- job management looks up the ``RecipeInterpreter`` registered for a Work Master's
  ``dataschema`` (``gateway.recipe_interpreters``), asks it to ``validate`` the recipe when a job
  is stored, tells it to ``start`` when the job may start, and passes on the MES's Pause, Resume,
  Stop and Abort through ``command``;
- the interpreter reports back through ``JobControl`` (``gateway.job_control``): the job runs,
  completes with results, is held after a failure, or aborts.

Every ``JobControl`` call is a compare-and-swap on the job's stored state: it returns ``False``
(and changes nothing) when the job is not in the state the call expects, for example because the
MES aborted it meanwhile. Interpreters treat ``False`` as "stop working on this job".

Other plugins (the web UI) read jobs through ``JobControl`` too (``jobs``, ``response``) and ask
for the MES's Pause, Resume and Abort on an operator's behalf (``request``). An interpreter that
can draw its recipes and say how far a job got implements ``RecipeViewer`` as well; one that can
list what its recipes ask of equipment implements ``EquipmentUser``, so job management checks
the routing of a recipe (``gateway.routing``) before a job runs it, and the dispatcher allocates
that equipment to the job while it runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from gateway.controls import StepEdit
from gateway.equipment import CommandLink
from gateway.jobstates import JobState, TopState
from gateway.resilience import TransientError
from gateway.routing import EquipmentUse

RECIPE_VERSION_ID = "RecipeVersion"
"""``ID`` of the Job Response entry naming the recipe version a job runs (``recipe_version``)."""


def recipe_version(recipe: Any) -> str:
    """A content hash of a recipe (``sha256:<hex>`` of its canonical JSON).

    Key order and white space do not change it; any change of content does. Job management
    records it in the Job Response when a job is stored, so a result says which recipe made it.
    """
    text = json.dumps(recipe, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class JobCommand(StrEnum):
    """MES methods that act on a job while its recipe runs."""

    PAUSE = "Pause"
    RESUME = "Resume"
    STOP = "Stop"
    ABORT = "Abort"


def missed_command(state: JobState | None, *, paused: bool) -> JobCommand | None:
    """The MES command an interpreter's execution missed, given its job's state now.

    For an execution that runs (``paused`` false) or waits for the MES's Resume (``paused``:
    paused by the MES, or held after a hold it reported): a crash between the job's state change
    and ``RecipeInterpreter.command`` loses the command, and reconciliation applies it from
    this. An execution that is finishing, or holding without having said so yet, is ending by
    its own doing: it is not asked about. ``None`` (the job is gone) counts as aborted.
    """
    top = state.top if state is not None else TopState.END
    if top in (TopState.END, TopState.ABORTED):
        return JobCommand.ABORT
    if top is TopState.ENDED:
        return JobCommand.STOP
    if top is TopState.INTERRUPTED and not paused:
        return JobCommand.PAUSE
    if top is TopState.RUNNING and paused:
        return JobCommand.RESUME
    return None


@dataclass(frozen=True)
class RecipeJob:
    """A job as an interpreter sees it: ids, the job order and its Work Master as stored JSON.

    ``job_order`` and ``work_master`` are the documents in their OPC UA JSON form (PascalCase
    keys: ``JobOrderID``, ``JobOrderParameters``, ``WorkMasterID``; ``ID``, ``Parameters``,
    ``Data``, ``DataSchema``).
    """

    scope: str
    job_order_id: str
    job_order: Mapping[str, Any]
    work_master: Mapping[str, Any]
    # When the job order was stored (RFC 3339): a job id cleared and stored again is another
    # job, with another time.
    stored_at: str

    @property
    def recipe(self) -> Any:
        return self.work_master.get("Data")

    @property
    def dataschema(self) -> str | None:
        schema = self.work_master.get("DataSchema")
        return schema if isinstance(schema, str) else None

    def parameters(self) -> dict[str, Any]:
        """Work Master parameters overridden by job order parameters, by ``ID``."""
        values: dict[str, Any] = {}
        for source in (
            self.work_master.get("Parameters"),
            self.job_order.get("JobOrderParameters"),
        ):
            for parameter in source or ():
                if isinstance(parameter, Mapping) and isinstance(parameter.get("ID"), str):
                    values[parameter["ID"]] = parameter.get("Value")
        return values


@dataclass(frozen=True)
class ProcessValue:
    """One result an interpreter reports; it becomes an entry of the Job Response's data."""

    id: str
    value: Any
    unit: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class JobOutcome:
    """What an interpreter reports when a job ends, well or badly."""

    results: Sequence[ProcessValue] = field(default_factory=tuple)
    error: str | None = None
    # True when a command that may have changed the product or equipment was sent before the
    # failure: the MES then knows the part is not untouched.
    side_effects: bool = False
    # The command whose failure ended the job (``{job}:{action}:{attempt}``), for the log.
    correlation_id: str | None = None


@dataclass(frozen=True)
class JobSummary:
    """One job of a scope, as lists show it. Times are RFC 3339 text, ``None`` when unknown."""

    job_order_id: str
    state: JobState  # e.g. ``Running`` or ``Ended.Completed``
    priority: int
    stored_at: str  # when the job entered the station
    start_time: str | None  # first time Running
    end_time: str | None  # reached Ended or Aborted
    work_master_id: str | None
    recipe_version: str | None  # ``recipe_version`` of its Work Master's recipe at Store


@dataclass(frozen=True)
class RequestOutcome:
    """How job management answered a method call made for someone other than the MES."""

    accepted: bool
    status: str  # the ReturnStatus name, e.g. ``NO_ERROR``, ``INVALID_JOB_ORDER_STATUS``
    message: str | None = None  # why not, when not accepted


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting in its scope's queue (AllowedToStart, not let start yet)."""

    job_order_id: str
    position: int  # 1: starts next (when capacity, equipment and its StartTime allow)
    priority: int
    start_time: str | None  # RFC 3339; it does not start before
    equipment: Sequence[str]  # what it will hold while it runs
    # Of its equipment, what an unsafe failure left blocked: it waits for an acknowledgement.
    blocked: Sequence[str] = ()


@dataclass(frozen=True)
class ScopeQueue:
    """A scope's dispatching state: online, capacity, who holds a slot, who waits in order."""

    online: bool
    reason: str | None  # why offline
    capacity: int  # jobs it runs at once; 0: no limit
    running: Mapping[str, Sequence[str]]  # jobs let start and not ended -> equipment they hold
    waiting: Sequence[QueuedJob]
    # Equipment an unsafe failure left blocked until acknowledged -> why (``JobControl.block``).
    blocked: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Acknowledgement:
    """Blocked equipment released by someone (``JobControl.acknowledge``)."""

    equipment: str
    job_order_id: str  # the job whose unsafe failure blocked it
    reason: str


class JobControl(Protocol):
    """What an interpreter may do to its job (implemented by the job management plugin)."""

    async def job(self, scope: str, job_order_id: str) -> RecipeJob | None:
        """The job and its Work Master, or ``None`` when it no longer exists."""
        ...

    async def state(self, scope: str, job_order_id: str) -> JobState | None:
        """The job's state (``JobState.RUNNING``, ``JobState.HELD``...); ``None`` if unknown."""
        ...

    async def startable(self, scope: str) -> Sequence[str]:
        """The jobs of ``scope`` the dispatcher let start that are not running yet, i.e.
        waiting for their interpreter (queued jobs are not listed: their turn has not come).

        Interpreters reconcile with it: a job whose hand-off was lost (a crash between the
        dispatch and ``start``) is started all the same.
        """
        ...

    async def queue(self, scope: str) -> ScopeQueue:
        """The scope's queue as it is now (for displays)."""
        ...

    async def run(self, scope: str, job_order_id: str) -> bool:
        """AllowedToStart -> Running, when execution begins."""
        ...

    # ``run`` (``complete``, ``abort``, ``hold``, ``record_results``): the ``RecipeJob.stored_at``
    # of the job order the report is for. A job id the MES cleared and stored again meanwhile
    # names another job order, which the report leaves alone (``False``).

    async def complete(
        self, scope: str, job_order_id: str, outcome: JobOutcome, *, run: str | None = None
    ) -> bool:
        """Running -> Ended.Completed, writing the Job Response with ``outcome.results``."""
        ...

    async def abort(
        self, scope: str, job_order_id: str, outcome: JobOutcome, *, run: str | None = None
    ) -> bool:
        """Running or Interrupted -> Aborted, with the error and the side-effects flag."""
        ...

    async def hold(
        self, scope: str, job_order_id: str, reason: str, *, run: str | None = None
    ) -> bool:
        """Running -> Interrupted.Held after a failure the recipe wants an operator to see.

        The MES's Resume then retries (``command(RESUME)``); its Abort ends the job.
        """
        ...

    async def record_results(
        self,
        scope: str,
        job_order_id: str,
        results: Sequence[ProcessValue],
        *,
        run: str | None = None,
    ) -> bool:
        """Update the Job Response with results so far, without changing the job's state."""
        ...

    async def block(
        self, scope: str, job_order_id: str, equipment: Sequence[str], reason: str
    ) -> bool:
        """The job failed unsafe (its rollback did not make the station safe): ``equipment``
        is blocked for new jobs until someone acknowledges it (``acknowledge``); queued jobs
        that need it wait, with that reason. ``False``: the station does not block (a setting).
        Called before the job's end is reported, so no job starts on it in between."""
        ...

    async def acknowledge(
        self, scope: str, equipment: Sequence[str] | None, acknowledged_by: str
    ) -> Sequence[Acknowledgement]:
        """Release blocked ``equipment`` (``None``: all of the scope's) on behalf of
        ``acknowledged_by``; returns what was released (traced with who did it)."""
        ...

    async def release(self, scope: str, job_order_id: str) -> None:
        """The job's rollback made the station safe: what the job itself blocked while it was
        rolled back (``block``) takes jobs again; other jobs' blocks stay."""
        ...

    async def jobs(self, scope: str) -> Sequence[JobSummary]:
        """The scope's jobs, highest priority first (for displays; not a consistent snapshot)."""
        ...

    async def summary(self, scope: str, job_order_id: str) -> JobSummary | None:
        """One job as ``jobs`` lists it, or ``None`` when it does not exist."""
        ...

    async def response(self, scope: str, job_order_id: str) -> Mapping[str, Any] | None:
        """The job's Job Response as OPC UA JSON (``ISA95JobResponseDataType``), or ``None``."""
        ...

    async def request(
        self,
        scope: str,
        job_order_id: str,
        command: JobCommand,
        requested_by: str,
        *,
        reason: str | None = None,
    ) -> RequestOutcome:
        """Call the MES method ``command`` on the job for ``requested_by`` (an operator).

        Exactly as if the MES had called it (same checks, state change, status event and
        interpreter hand-off); observers of ``gateway_job_method_called`` see who asked.
        ``reason``: why, written as the Job Response's ``Description`` with the change (the
        status event carries it to the MES).
        """
        ...

    async def set_breakpoint(
        self,
        scope: str,
        step: str,
        *,
        job_order_id: str | None = None,
        work_master_id: str | None = None,
        enabled: bool = True,
        requested_by: str,
    ) -> RequestOutcome:
        """Set or clear a breakpoint (``BreakpointControl``) on a step of a job that has not
        ended, or of a configured Work Master, for ``requested_by`` (the MES, an operator)."""
        ...

    async def edit_steps(
        self,
        scope: str,
        job_order_id: str,
        edit: StepEdit,
        *,
        expected: str | None = None,
        requested_by: str,
    ) -> RequestOutcome:
        """Edit the steps of a job that has not ended (``StepEditor``) for ``requested_by``;
        ``expected``: the recipe version the edit is made against (refused if it changed).
        Accepted, ``RequestOutcome.message`` is the job's new recipe version."""
        ...


async def report_completed(
    control: JobControl,
    scope: str,
    job_order_id: str,
    outcome: JobOutcome,
    *,
    run: str | None = None,
) -> bool:
    """Tell job control that the job's recipe completed: Running -> Ended.Completed.

    ``False``: the MES paused the job just as its recipe ended (Complete is refused while the job
    is Interrupted). The interpreter keeps the end to itself and reports it again when the MES
    resumes the job (``command(RESUME)``), or stops or aborts it: then the job keeps the state the
    MES gave it and gets the recipe's results. A job gone meanwhile, or stored again since
    (``run``: as for ``JobControl.complete``), has nothing to hear.
    """
    for _ in range(3):  # Running again between two looks: the MES resumed it meanwhile
        if await control.complete(scope, job_order_id, outcome, run=run):
            return True
        job = await control.summary(scope, job_order_id)
        if job is None or (run and job.stored_at != run):
            return True
        state = job.state
        if state.top is TopState.INTERRUPTED:
            return False
        if state is JobState.COMPLETED:  # by this report, handled twice (a retry, a crash)
            return True
        if state.top is not TopState.RUNNING:  # the MES stopped or aborted it meanwhile
            await control.record_results(scope, job_order_id, outcome.results, run=run)
            return True
    raise TransientError(f"job {scope}/{job_order_id}: its state kept changing under Complete")


@dataclass(frozen=True)
class StepProgress:
    """An active step or branch of a running recipe; ``entered_at`` is a Unix time."""

    name: str
    entered_at: float
    branch: bool = False


@dataclass(frozen=True)
class ActionProgress:
    """The latest activation of one action: its phase and tries, its result or last error."""

    name: str
    step: str
    phase: str  # pending, dispatched, waiting, done, failed, cancelled
    attempt: int  # correlation attempt number of the last try
    tries: int  # tries in this activation
    max_attempts: int
    dispatched_at: float | None  # Unix time of the last try
    deadline: float | None  # Unix time its timeout ends, while it waits
    error: str | None
    result: Any = None
    # Where the command's work can be followed (``gateway_command_link``): a delegated job.
    link: CommandLink | None = None
    # A member's run of a fan-out (``tighten@nr2``, a pipeline's ``lift@slot3``): the fan-out
    # action it belongs to and the member, so that a display groups each member's runs.
    fan_out: str | None = None
    member: str | None = None


@dataclass(frozen=True)
class RecipeProgress:
    """How far a job's recipe got: what is active, each action, the results and the error."""

    status: str  # the interpreter's own word: running, paused, held, finishing, ended
    active: Sequence[StepProgress]
    actions: Sequence[ActionProgress]
    results: Mapping[str, Any]
    error: str | None = None
    outcome: str | None = None  # when it ended: completed, aborted, stopped...
    paused_before: str | None = None  # paused at a breakpoint: the step it stopped before
    breakpoints: Sequence[str] = ()  # the steps it pauses before


@runtime_checkable
class RecipeViewer(Protocol):
    """Optional for an interpreter: draw its recipes and report a running job's progress."""

    def render_svg(self, recipe: Any, active: Collection[str] = ()) -> str:
        """The recipe as a standalone SVG drawing, ``active`` steps marked with class
        ``active``; raises ``ValidationError`` for a recipe it cannot draw."""
        ...

    async def progress(self, scope: str, job_order_id: str) -> RecipeProgress | None:
        """The job's progress, or ``None`` when this interpreter has (no longer) any state."""
        ...


@runtime_checkable
class EquipmentUser(Protocol):
    """Optional for an interpreter: the actions of a recipe that talk to equipment."""

    def equipment_uses(self, recipe: Any) -> Sequence[EquipmentUse]:
        """Every command and event action of ``recipe`` (empty for a recipe it cannot load;
        ``validate`` reports those)."""
        ...


def equipment_uses(interpreter: object, recipe: Any) -> Sequence[EquipmentUse]:
    """What ``recipe`` asks of equipment, when its interpreter can say (else nothing)."""
    if isinstance(interpreter, EquipmentUser):
        return interpreter.equipment_uses(recipe)
    return ()


class RecipeInterpreter(Protocol):
    """Runs the recipes of one format, identified by the Work Master's ``dataschema`` URI."""

    dataschema: str

    def validate(self, recipe: Any) -> Sequence[str]:
        """Problems with a recipe, each naming the element; empty when it can run.

        Called when a Work Master is configured and when a job referencing it is stored, so an
        invalid recipe is rejected before it could fail halfway.
        """
        ...

    async def start(self, job: RecipeJob) -> None:
        """The job entered AllowedToStart: begin executing it (durably; return promptly)."""
        ...

    async def command(self, job: RecipeJob, command: JobCommand) -> None:
        """The MES paused, resumed, stopped or aborted the job; its state is already changed."""
        ...
