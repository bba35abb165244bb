"""What a recipe format supplies to the recipe runtime, and the state the runtime keeps per job.

Every recipe format (SFC charts, sequences, a vendor's own) runs on one runtime, the
``gateway_runtime`` plugin. It owns everything distributed: the job's stored execution state and
its compare-and-swap, run numbering, durable timers, the outbox of commands and their resends,
routing by type, reconciliation after a crash, the MES's Pause / Resume / Stop / Abort, reporting
the end and the results to job management, the per-job trace and the observer hooks. A format
supplies only what is its own (``RecipeFormat``):

- ``compile(recipe) -> Program``: the recipe checked and compiled, or ``RecipeError`` naming the
  path of every bad element (``recipe.steps[2].type_id: required``);
- the program's ``Executor``: a pure function of (execution state, stimulus, time) that changes
  the ``Execution`` it is given and returns the ``Effects`` to carry out (commands to send,
  timers to set, a report to job management). No I/O, no clock: the runtime calls it inside its
  compare-and-swap, on whichever instance the stimulus arrives, as often as a conflict needs;
- how to draw a program (SVG, and Mermaid where it can).

A format registers itself with the ``gateway_register_recipe_formats`` hook; the runtime then
serves its Work Masters' ``DataSchema``. ``gateway.testing.formats`` holds the contract suite a
format's tests run.

The state is generic: ``nodes`` are the steps (or branches, blocks...) active now, ``actions``
the latest activation of each action, with the phase of its current try. A format keeps
anything else it needs in ``Execution.memo`` (JSON values only).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from gateway.controls import StepEdit
from gateway.errors import ValidationError
from gateway.fanout import FanOut, fan_out_uses
from gateway.recipes import JobCommand
from gateway.routing import EquipmentUse


class RecipeError(ValidationError):
    """A recipe that cannot run; ``problems`` lists every problem as ``"element: reason"``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("recipe", "; ".join(self.problems))


class Status(StrEnum):
    """Where a job's execution is."""

    RUNNING = "running"
    PAUSED = "paused"  # MES Pause: nothing new is dispatched, nothing advances
    HELD = "held"  # an action failed and the recipe holds: MES Resume retries it
    # The job failed (or the MES aborted it): the runtime undoes what it did (``Rollback``).
    COMPENSATING = "compensating"
    FINISHING = "finishing"  # complete or failed: reporting to job management
    ENDED = "ended"  # reported; the state stays for inspection until it expires


class Phase(StrEnum):
    """Where one action's current activation is."""

    PENDING = "pending"  # to be dispatched (at ``not_before`` if set)
    DISPATCHED = "dispatched"  # command sent, waiting for the equipment's reply
    WAITING = "waiting"  # an event action: waiting for an equipment event
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"  # its step was left, it was reset, or the job stopped


ACTIVE_PHASES = frozenset({Phase.PENDING, Phase.DISPATCHED, Phase.WAITING})


class Interaction(StrEnum):
    """How an action talks to equipment."""

    PUSH_COMMAND = "push_command"  # send a command, wait for its reply
    PULL_EVENT = "pull_event"  # wait for an event the equipment reports on its own


@dataclass(frozen=True)
class ActionSpec:
    """What the runtime needs to know of one action of a program: where its command goes and
    with what, how long it may take, how often it is tried."""

    name: str
    type_id: str
    interaction: Interaction = Interaction.PUSH_COMMAND
    equipment: str | None = None  # None: routed by ``type_id`` when the job starts
    parameters: Mapping[str, Any] = field(default_factory=dict)
    timeout_seconds: float | None = None
    max_attempts: int = 1
    side_effects: bool = True  # whether sending it may change the product or equipment
    # What undoes this action once it completed (unclamp for clamp), run by the runtime when
    # the job fails: ``gateway.compensation``. Its ``equipment`` None: its action's.
    compensation: ActionSpec | None = None
    # Sent to a set of equipment at once (``gateway.fanout``); ``members``: that set, fixed by
    # the runtime when the job starts.
    fan_out: FanOut | None = None
    members: tuple[str, ...] = ()
    # A per-member pipeline: these steps run one after the other for each member, each
    # member on its own (a fan-out's ``pipeline``); empty: the action's own command.
    pipeline: tuple[ActionSpec, ...] = ()
    # A pipeline step's wait before each further try (a durable ``DUE`` timer; 0: at once).
    backoff_seconds: float = 0.0

    def spec(self) -> ActionSpec:
        """Only what the runtime reads: a format may subclass ``ActionSpec`` with its own rules
        (a sequence step's condition), which the program's ``actions`` leave out."""
        return ActionSpec(**{item.name: getattr(self, item.name) for item in fields(ActionSpec)})

    def longest_wait(self) -> float:
        """How long its tries may take in all: each try's wait and the backoffs between."""
        tries = self.max_attempts
        return (self.timeout_seconds or 0.0) * tries + self.backoff_seconds * (tries - 1)

    def equipment_uses(self) -> list[EquipmentUse]:
        """What it asks of equipment: its own, or each of its fan-out's."""
        if self.fan_out is None:
            return [self.equipment_use()]
        steps = self.pipeline or (self,)
        return [
            use
            for step in steps
            for use in fan_out_uses(step.name, step.type_id, self.fan_out, steps[0].type_id)
        ]

    def equipment_use(self) -> EquipmentUse:
        return EquipmentUse(
            self.name,
            self.type_id,
            self.equipment,
            command=self.interaction is Interaction.PUSH_COMMAND,
        )


@dataclass
class ActionRun:
    """One activation of an action (a loop re-entering its step starts a fresh one)."""

    name: str
    step: str
    phase: Phase = Phase.PENDING
    attempt: int = 0  # correlation attempt number of the last dispatch (unique per job)
    tries: int = 0  # dispatches in this activation, for the retry policy
    blocking: bool = True  # its step waits for it
    stored: bool = False  # outlives its step (SFC ``S``)
    not_before: float | None = None  # a delay, or a retry's backoff
    dispatched_at: float | None = None  # when the current try was sent (reply latency)
    deadline: float | None = None  # timeout of the current try
    limit_at: float | None = None  # a time-limited action ends (without error) at this time
    error: str | None = None

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES


@dataclass
class NodeRun:
    """An active step, block or branch."""

    name: str
    entered_at: float
    branch: bool = False
    open_paths: list[int] = field(default_factory=list)  # branch: paths not finished yet
    selected: bool = False  # branch: paths chosen (a selection may wait for a guard)


@dataclass
class Execution:
    """One job's execution state, as stored (one JSON document per job).

    Everything needed to continue the job is here, so any instance can apply its next
    stimulus. ``version`` is the compare-and-swap token; ``run`` names the job order this state
    is for (a job id cleared and stored again starts a new run, its versions from 0 again). Both
    stay right after ``scope`` and ``job``: the commit script reads them off the head.
    """

    scope: str
    job: str
    version: int = 0
    run: str = ""
    status: Status = Status.RUNNING
    nodes: dict[str, NodeRun] = field(default_factory=dict)
    actions: dict[str, ActionRun] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)  # action name -> last result
    attempts: dict[str, int] = field(default_factory=dict)  # action name -> last attempt
    side_effects: bool = False  # a command that may change things has been sent
    outcome: str | None = None  # "completed", "aborted", "stopped"
    error: str | None = None
    failed_action: str | None = None
    recheck_at: float | None = None  # a condition waits on time: look again then
    memo: dict[str, Any] = field(default_factory=dict)  # the format's own (JSON values)
    # Kept by the runtime for compensation (``gateway.compensation``), not by formats: the
    # completed actions that declare one, as ``[action, step, attempt]`` in completion order;
    # whether an action that may change things and has no compensation completed; the rollback.
    compensable: list[list[Any]] = field(default_factory=list)
    uncompensated: bool = False
    rollback: Rollback | None = None
    # Kept by the runtime for fan-outs (``gateway.fanout``): per fan-out action, the try that
    # went to its members and how each member ended.
    fan_out: dict[str, Any] = field(default_factory=dict)
    # The runtime's, not the format's: the steps (nodes or actions) the job pauses before
    # (breakpoints), and the one it is paused before now, which it enters on Resume.
    breakpoints: list[str] = field(default_factory=list)
    paused_before: str | None = None
    # The runtime's: the version of the recipe it runs (``""``: the one it started with; an
    # edit of its steps changes it), so every instance runs the edited program.
    recipe: str = ""
    # The runtime's: every node the job has entered, in order (once each), so an edit knows
    # the steps not reached yet.
    reached: list[str] = field(default_factory=list)


@dataclass
class Rollback:
    """A failed job undoing what it did: the compensations still to run (groups run one after
    the other, the compensations of a group at once), what ran, and the end it will report."""

    outcome: str  # the end being compensated ("aborted", "aborted by the MES")
    report: str  # the ``Report`` to make once compensated
    error: str | None = None  # the failure's own error text
    groups: list[list[str]] = field(default_factory=list)  # actions to undo, next group first
    # ``{"action", "compensation", "outcome": "done" | "failed" | "not run", "error"}`` each.
    ran: list[dict[str, Any]] = field(default_factory=list)
    safe: bool | None = None  # set at its end: FAILED_SAFE (True) or FAILED_UNSAFE


class TimerKind(StrEnum):
    """What a durable timer stands for."""

    TIMEOUT = "timeout"  # an action's try got no answer in time
    DUE = "due"  # a delayed action (or a retry's backoff) may start
    LIMIT = "limit"  # a time-limited action ends
    RECHECK = "recheck"  # conditions on elapsed time are due to be evaluated again
    LIVENESS = "liveness"  # check whether the equipment of a waiting action is still online


class Report(StrEnum):
    """What the execution tells job management once the change is stored."""

    COMPLETE = "complete"
    ABORT = "abort"
    HOLD = "hold"
    RECORD = "record"  # results only: the MES stopped or aborted the job itself


@dataclass(frozen=True)
class Timer:
    """A durable timer: at ``due`` (Unix time) the executor gets ``kind`` for ``action``."""

    due: float
    kind: TimerKind
    action: str = ""
    attempt: int = 0


@dataclass
class Effects:
    """What the runtime carries out after a change is stored."""

    sends: list[str] = field(default_factory=list)  # actions whose current try goes out
    timers: list[Timer] = field(default_factory=list)
    report: Report | None = None
    changed: bool = False  # the state changed and must be written
    # A reply matched its command: seconds since sending, and whether it reported an error.
    reply: tuple[float, bool] | None = None


S = TypeVar("S", bound=ActionSpec)


def bound(spec: S, equipment: Mapping[str, str]) -> S:
    """``spec`` sent to the equipment routing chose for it when the job started, if it names
    none itself (``Program.bind``)."""
    if spec.equipment is None and spec.name in equipment:
        return replace(spec, equipment=equipment[spec.name])
    return spec


def finish(
    execution: Execution,
    effects: Effects,
    outcome: str,
    error: str | None = None,
    *,
    report: Report | None = None,
) -> Effects:
    """End ``execution`` as every executor does: what is active is cancelled, no node stays
    active, and job management hears of the end once it is stored (``report``: by default
    ``COMPLETE`` for the outcome ``"completed"``, ``ABORT`` otherwise; ``RECORD`` when the MES
    stopped or aborted the job itself and only the results so far are to be recorded)."""
    for run in execution.actions.values():
        if run.active:
            run.phase = Phase.CANCELLED
    execution.nodes.clear()
    execution.status = Status.FINISHING
    execution.outcome = outcome
    execution.error = error
    effects.report = report or (Report.COMPLETE if outcome == "completed" else Report.ABORT)
    effects.changed = True
    return effects


def dispatch(
    execution: Execution,
    run: ActionRun,
    now: float,
    effects: Effects,
    *,
    timeout: float | None,
    side_effects: bool = True,
    command: bool = True,
) -> Effects:
    """Start the next try of ``run`` as every executor does: a command sent (``command``; else
    its event awaited), numbered by the job's next attempt of the action (each try its own
    correlation id), with a ``TIMEOUT`` timer when it has a ``timeout``."""
    run.attempt = execution.attempts[run.name] = execution.attempts.get(run.name, 0) + 1
    run.tries += 1
    run.not_before, run.dispatched_at = None, now
    run.deadline = now + timeout if timeout else None
    run.phase = Phase.DISPATCHED if command else Phase.WAITING
    if command:
        effects.sends.append(run.name)
        execution.side_effects = execution.side_effects or side_effects
    if run.deadline is not None:
        effects.timers.append(Timer(run.deadline, TimerKind.TIMEOUT, run.name, run.attempt))
    effects.changed = True
    return effects


# Where a try out may still be answered, or time out (a held job's other tries too).
LIVE = frozenset({Status.RUNNING, Status.PAUSED, Status.HELD})
# What ``finish`` reported for an outcome, reported again (rule 7); any other: the MES's own.
_REPORTED = {"completed": Report.COMPLETE, "aborted": Report.ABORT}


def answerable(execution: Execution, action: str, attempt: int) -> ActionRun | None:
    """The try ``attempt`` of ``action`` if it is out and may still be answered or time out;
    ``None``: a late, repeated or cancelled one, which changes nothing (rule 2)."""
    run = execution.actions.get(action)
    if run is None or run.attempt != attempt or run.phase is not Phase.DISPATCHED:
        return None
    return run if execution.status in LIVE else None


def defer(run: ActionRun, at: float, effects: Effects) -> Effects:
    """``run``'s next try waits until ``at`` (a retry's backoff): ``PENDING`` on a durable
    ``DUE`` timer, so the wait survives a restart and ends on whichever instance."""
    run.phase = Phase.PENDING
    run.not_before, run.deadline = at, None
    effects.timers.append(Timer(at, TimerKind.DUE, run.name))
    effects.changed = True
    return effects


def released(execution: Execution, timer: Timer, now: float) -> ActionRun | None:
    """The run whose wait (``defer``) the ``DUE`` ``timer`` ends: ``None`` when the job moved
    on, or the timer is of an earlier wait (the run's own is later)."""
    run = execution.actions.get(timer.action)
    if run is None or run.phase is not Phase.PENDING or execution.status not in LIVE:
        return None
    return None if run.not_before is not None and run.not_before > now else run


def mes_command(execution: Execution, command: JobCommand, effects: Effects) -> bool:
    """The MES's Pause, Resume, Stop or Abort as every executor takes it (rule 7). ``True``:
    a held job was resumed (running again, its error cleared), and the format tries its failed
    actions again; a Resume from Pause leaves advancing to the format, too."""
    status = execution.status
    if command is JobCommand.PAUSE and status is Status.RUNNING:
        execution.status = Status.PAUSED
    elif command is JobCommand.RESUME and status in (Status.PAUSED, Status.HELD):
        execution.status = Status.RUNNING
        if status is Status.HELD:
            execution.error = execution.failed_action = None
    elif command in (JobCommand.STOP, JobCommand.ABORT) and status in LIVE:
        outcome = "stopped" if command is JobCommand.STOP else "aborted by the MES"
        finish(execution, effects, outcome, report=Report.RECORD)
        return False
    else:
        if status is Status.FINISHING and command is not JobCommand.PAUSE:
            # Its end may wait for this (the MES paused the job as its recipe ended: job
            # management completes only a Running job): report it again.
            effects.report = _REPORTED.get(execution.outcome or "", Report.RECORD)
        return False
    effects.changed = True
    return status is Status.HELD


def resend(execution: Execution, effects: Effects) -> Effects:
    """Recovery (rule 8): every try still out goes again, with its correlation id."""
    if execution.status in LIVE:
        out = execution.actions.values()
        effects.sends.extend(run.name for run in out if run.phase is Phase.DISPATCHED)
    return effects


@dataclass(frozen=True)
class ExecutorOptions:
    """The runtime's settings an executor may use."""

    recheck_seconds: float = 0.25  # how often a condition on elapsed time is evaluated again
    # An action without a timeout on equipment that may go offline is checked this often
    # (0: never), so it fails as "equipment offline" instead of waiting forever.
    liveness_seconds: float = 0.0


class Executor(Protocol):
    """The pure semantics of one program for one job's parameters.

    Each method changes ``execution`` in place and returns the effects. A stimulus that does not
    apply (a late reply, a timer of a try that was answered, a command meaning nothing in the
    current status) changes nothing: any instance may apply any stimulus any number of times.
    """

    def start(
        self, scope: str, job: str, now: float, attempts: Mapping[str, int] | None = None
    ) -> tuple[Execution, Effects]:
        """The job's first state; tries are numbered on from ``attempts`` (an earlier run of
        the job id: a late reply to that run must match no try of this one)."""
        ...

    def on_reply(
        self,
        execution: Execution,
        action: str,
        attempt: int,
        data: Any,
        error: str | None,
        now: float,
        *,
        delivered: bool = True,
    ) -> Effects:
        """The equipment answered try ``attempt`` (``delivered`` false: it could not be sent)."""
        ...

    def on_event(self, execution: Execution, action: str, data: Any, now: float) -> Effects:
        """An equipment event the waiting ``action`` takes."""
        ...

    def on_timer(
        self, execution: Execution, timer: Timer, now: float, offline: str | None = None
    ) -> Effects:
        """A durable timer is due (``offline``: why the action's equipment is offline)."""
        ...

    def on_command(self, execution: Execution, command: JobCommand, now: float) -> Effects:
        """The MES's Pause, Resume, Stop or Abort (the job's state is already changed)."""
        ...

    def on_resume(self, execution: Execution, now: float) -> Effects:
        """Recovery: send again what still waits for a reply, and advance what can."""
        ...


class Program(Protocol):
    """A compiled recipe."""

    @property
    def actions(self) -> Mapping[str, ActionSpec]:
        """Every action that sends a command or waits for an event, by name, in recipe order."""
        ...

    def executor(self, parameters: Mapping[str, Any], options: ExecutorOptions) -> Executor:
        """The executor of a job with these parameters (built for every stimulus: cheap)."""
        ...

    def bind(self, equipment: Mapping[str, str]) -> Program:
        """This program with actions that name no equipment bound to ``equipment[action]``
        (routing by type, fixed when a job starts)."""
        ...


@runtime_checkable
class StepEditing(Protocol):
    """Optional for a ``RecipeFormat``: editing the steps of a job that it has not begun."""

    def edit_steps(self, recipe: Any, edit: StepEdit, execution: Execution | None) -> Any:
        """``recipe`` (JSON) with ``edit`` applied; ``execution``: the job's state (``None``:
        not started). ``RecipeError`` names why not (an unknown step, one that has begun);
        the runtime compiles the result, so an edit that breaks the recipe is refused too."""
        ...


class RecipeFormat(Protocol):
    """A recipe format: registered with ``gateway_register_recipe_formats``."""

    name: str  # short, for the CLI's ``--format`` (``sfc``, ``sequence``)
    dataschema: str  # the Work Master ``DataSchema`` URI of its recipes

    def compile(self, recipe: Any) -> Program:
        """The program of recipe JSON; ``RecipeError`` names every problem."""
        ...

    def recognizes(self, recipe: Any) -> bool:
        """Whether recipe JSON has this format's shape (its top-level keys), valid or not: for
        tools that must tell a bare recipe's format (``gateway recipe validate``)."""
        ...

    def summary(self, program: Program) -> str:
        """One line for ``gateway recipe validate``: ``OK: 3 steps, 4 actions``."""
        ...

    def render_svg(self, program: Program, active: Collection[str] = ()) -> str:
        """A standalone SVG drawing, the ``active`` nodes marked with class ``active``. Each
        node is a ``g.step[data-step=name]`` and each action a ``g.action[data-action=name]``:
        the web UI's job page lights them live from the job's progress."""
        ...

    def render_mermaid(self, program: Program) -> str:
        """A Mermaid flowchart of the program."""
        ...
