"""The ISA-95 job order state machine of OPC 40001-3 (ISA95-JOBCONTROL v2, section 6.2).

States and numbers (top level: table 39; substates: tables 42, 45, 48; InitialState and EndState
are the spec's dotted pseudo-states, numbered 0 and 7 as MicroDCS does)::

    InitialState       0   the job is not in the station (never stored, or cleared)
    NotAllowedToStart  1   .Waiting 1  .Ready 2  .Loaded 3
    AllowedToStart     2   .Waiting 1  .Ready 2  .Loaded 3
    Running            3
    Interrupted        4   .Held 1  .Suspended 2
    Ended              5   .Completed 1  .Closed 2
    Aborted            6
    EndState           7   cancelled or cleared: removed from the station

A state path names the state and substate, e.g. ``AllowedToStart.Ready``. A stored job passed
the acceptance checks, so it enters the Prepared states as ``Ready`` (Waiting and Loaded exist
for subtypes of this machine; no method leads there).

Triggers, their legal source states and the destination (anything else is an invalid state; a
trigger on a parent state applies to all its substates)::

    caller  trigger        from                                    to
    MES     Store          InitialState                            NotAllowedToStart.Ready
    MES     StoreAndStart  InitialState                            AllowedToStart.Ready
    MES     Start          NotAllowedToStart                       AllowedToStart.Ready
    MES     RevokeStart    AllowedToStart                          NotAllowedToStart.Ready
    MES     Update         NotAllowedToStart, AllowedToStart       (stays)
    MES     Pause          Running                                 Interrupted.Suspended
    MES     Resume         Interrupted                             Running
    MES     Stop           Running, Interrupted                    Ended.Closed
    MES     Abort          NotAllowedToStart, AllowedToStart,      Aborted
                           Running, Interrupted
    MES     Cancel         NotAllowedToStart, AllowedToStart       EndState
    MES     Clear          Ended, Aborted                          EndState
    recipe  Run            AllowedToStart                          Running
    recipe  Complete       Running                                 Ended.Completed
    recipe  Fail           Running, Interrupted                    Aborted
    recipe  Hold           Running                                 Interrupted.Held
    recipe  ResultUpdate   Running, Interrupted, Ended, Aborted     (stays; results only)

Store and StoreAndStart on a job that exists are duplicates, not state errors; the other MES
methods on a job that does not exist find no job (``InitialState`` / ``EndState`` here only
describe that). Pause is "externally suspended", Hold "internally held" (table 48); Stop ends a
job early (Closed: no post-processing follows), Complete ends it normally (Completed).

A job's state is a ``gateway.jobstates.JobState`` (its value is the state path the store and the
wire carry); sources in the table below are ``TopState`` where a trigger applies to all
substates. The machine is defined with ``transitions`` (hierarchical); the legal moves are worked
out once, at import, into ``TRANSITIONS`` so deciding a command is a dictionary lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transitions.extensions.nesting import HierarchicalMachine, NestedState

from gateway.changes import Trigger
from gateway.jobstates import SUBSTATES, TOP_STATES, JobState, StateFilter, TopState
from gateway_jobs.model import LocalizedText, RelativePath, RelativePathElement, State

MES_METHODS = (
    Trigger.STORE,
    Trigger.STORE_AND_START,
    Trigger.START,
    Trigger.REVOKE_START,
    Trigger.UPDATE,
    Trigger.PAUSE,
    Trigger.RESUME,
    Trigger.STOP,
    Trigger.ABORT,
    Trigger.CANCEL,
    Trigger.CLEAR,
)
CONTROL_TRIGGERS = (
    Trigger.RUN,
    Trigger.COMPLETE,
    Trigger.FAIL,
    Trigger.HOLD,
    Trigger.RESULT_UPDATE,
)
CREATING = frozenset({Trigger.STORE, Trigger.STORE_AND_START})

_PREPARED_STATES = [TopState.NOT_ALLOWED_TO_START, TopState.ALLOWED_TO_START]
_ACTIVE_STATES = [TopState.RUNNING, TopState.INTERRUPTED]
_FINAL_STATES = [TopState.ENDED, TopState.ABORTED]
# (trigger, source states, destination; None: stays). A top-level source covers its substates.
_TRANSITIONS: list[tuple[Trigger, TopState | list[TopState], JobState | None]] = [
    (Trigger.STORE, TopState.INITIAL, JobState.NOT_ALLOWED_TO_START_READY),
    (Trigger.STORE_AND_START, TopState.INITIAL, JobState.ALLOWED_TO_START_READY),
    (Trigger.START, TopState.NOT_ALLOWED_TO_START, JobState.ALLOWED_TO_START_READY),
    (Trigger.REVOKE_START, TopState.ALLOWED_TO_START, JobState.NOT_ALLOWED_TO_START_READY),
    (Trigger.UPDATE, _PREPARED_STATES, None),
    (Trigger.PAUSE, TopState.RUNNING, JobState.SUSPENDED),
    (Trigger.RESUME, TopState.INTERRUPTED, JobState.RUNNING),
    (Trigger.STOP, _ACTIVE_STATES, JobState.CLOSED),
    (Trigger.ABORT, _PREPARED_STATES + _ACTIVE_STATES, JobState.ABORTED),
    (Trigger.CANCEL, _PREPARED_STATES, JobState.END),
    (Trigger.CLEAR, _FINAL_STATES, JobState.END),
    (Trigger.RUN, TopState.ALLOWED_TO_START, JobState.RUNNING),
    (Trigger.COMPLETE, TopState.RUNNING, JobState.COMPLETED),
    (Trigger.FAIL, _ACTIVE_STATES, JobState.ABORTED),
    (Trigger.HOLD, TopState.RUNNING, JobState.HELD),
    (Trigger.RESULT_UPDATE, [*_ACTIVE_STATES, *_FINAL_STATES], None),
]


class _PathState(NestedState):
    separator = "."  # state paths read "AllowedToStart.Ready", as JobState's values


class _Machine(HierarchicalMachine):
    state_cls = _PathState


def _state_definitions() -> list[Any]:
    definitions: list[Any] = []
    for name in TOP_STATES:
        children = SUBSTATES.get(name)
        if children is None:
            definitions.append(name)
        else:  # entered only through an explicit substate
            definitions.append({"name": name, "children": list(children)})
    return definitions


def _names(states: TopState | list[TopState]) -> str | list[str]:
    """The library's state names: plain text (it would name an ``Enum`` state by its member
    name, ``RUNNING``, not by its path)."""
    if isinstance(states, list):
        return [state.value for state in states]
    return states.value


def _build_table() -> dict[tuple[JobState, Trigger], JobState]:
    """Every (state, trigger) the machine allows, with the state it leads to."""
    machine = _Machine(
        model=None,
        states=_state_definitions(),
        transitions=[
            {
                "trigger": trigger.value,
                "source": _names(source),
                "dest": None if dest is None else dest.value,
            }
            for trigger, source, dest in _TRANSITIONS
        ],
        initial=TopState.INITIAL.value,
        auto_transitions=False,
    )
    assert set(JobState) <= set(machine.get_nested_state_names()), "JobState names its states"
    table: dict[tuple[JobState, Trigger], JobState] = {}
    for state in JobState:  # a job is only ever in one of these leaves
        table.update(_moves_from(machine, state))
    return table


def _moves_from(machine: _Machine, state: JobState) -> dict[tuple[JobState, Trigger], JobState]:
    """Try every trigger on a probe in ``state``, with the library's per-step logging muted."""
    library_log = logging.getLogger("transitions")
    level = library_log.level
    library_log.setLevel(logging.WARNING)
    moves: dict[tuple[JobState, Trigger], JobState] = {}
    try:
        for trigger in (*MES_METHODS, *CONTROL_TRIGGERS):
            probe = _Probe()
            machine.add_model(probe, initial=state.value)
            # Asked first: an event not allowed in the state would make the library warn.
            if probe.may_trigger(trigger.value) and probe.trigger(trigger.value):
                moves[(state, trigger)] = JobState(probe.state)
            machine.remove_model(probe)
    finally:
        library_log.setLevel(level)
    return moves


class _Probe:
    """A throw-away model the machine moves while the table is built.

    Annotations only: the machine adds these (it never replaces existing attributes).
    """

    state: str
    trigger: Callable[[str], bool]
    may_trigger: Callable[[str], bool]


TRANSITIONS = _build_table()


def next_state(state: JobState, trigger: Trigger) -> JobState | None:
    """Where ``trigger`` takes a job in ``state``; ``None`` when it is not allowed there."""
    return TRANSITIONS.get((state, trigger))


def state_list(state: JobState) -> list[State]:
    """The ISA95StateDataType array of a state: the top level, then the substate."""
    top, sub = state.top, state.substate
    entries = [State(state_text=LocalizedText("en", top.value), state_number=state.number)]
    if sub is not None:
        entries.append(
            State(
                browse_path=_substate_path(top, sub),
                state_text=LocalizedText("en", sub),
                state_number=state.substate_number,
            )
        )
    return entries


def _substate_path(top: TopState, sub: str) -> RelativePath:
    """``<top>Substates/<sub>``: the SubStateMachine object of table 37, then its state."""
    return RelativePath(
        elements=[
            RelativePathElement(
                reference_type_id="i=47",  # HasComponent
                is_inverse=False,
                include_subtypes=True,
                target_name=name,
            )
            for name in (f"{top}Substates", sub)
        ]
    )


def state_filter(entries: Sequence[State]) -> StateFilter:
    """The state an ISA95StateDataType array describes: a ``JobState`` when it names one
    (a top-level state without substates is one), else the top-level state alone.

    Each entry is matched by its ``StateText`` (or, without text, by ``StateNumber`` within its
    level). ``ValueError`` when it names no state of this machine.
    """
    if not entries:
        raise ValueError("the state needs at least its top-level entry")
    top = TopState(_level_name(entries[0], TOP_STATES, "top-level state"))
    if len(entries) == 1:
        return JobState(top.value) if top not in SUBSTATES else top
    if len(entries) > 2 or top not in SUBSTATES:
        raise ValueError(f"{top} has no substates here")
    return JobState(f"{top}.{_level_name(entries[1], SUBSTATES[top], f'substate of {top}')}")


def job_state(entries: Sequence[State]) -> JobState:
    """The state of a job as its ISA95StateDataType array says; ``ValueError`` when it names
    no state a job can be in (``Interrupted`` without its substate)."""
    state = state_filter(entries)
    if not isinstance(state, JobState):
        raise ValueError(f"{state} needs its substate ({', '.join(SUBSTATES[state])})")
    return state


def _level_name(entry: State, level: Mapping[str, int], what: str) -> str:
    text = entry.state_text.text if entry.state_text is not None else None
    if text is not None:
        if text not in level:
            raise ValueError(f"{text!r} is not a {what} (one of {', '.join(level)})")
        return text
    for name, number in level.items():
        if number == entry.state_number:
            return name
    raise ValueError(f"no {what} has StateText or StateNumber {entry.state_number!r}")
