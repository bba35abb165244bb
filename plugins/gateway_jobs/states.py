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

The machine is defined with ``transitions`` (hierarchical); the legal moves are worked out once,
at import, into ``TRANSITIONS`` so deciding a command is a dictionary lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transitions.extensions.nesting import HierarchicalMachine, NestedState

from gateway.jobstates import SUBSTATES, TOP_STATES, TopState
from gateway_jobs.model import LocalizedText, RelativePath, RelativePathElement, State

MES_METHODS = (
    "Store",
    "StoreAndStart",
    "Start",
    "RevokeStart",
    "Update",
    "Pause",
    "Resume",
    "Stop",
    "Abort",
    "Cancel",
    "Clear",
)
CONTROL_TRIGGERS = ("Run", "Complete", "Fail", "Hold", "ResultUpdate")
CREATING = frozenset({"Store", "StoreAndStart"})
INITIAL = "InitialState"
END = TopState.END.value
FINAL_TOP_STATES = frozenset(state.value for state in TopState if state.final)  # Clear may follow

_PREPARED_STATES = ["NotAllowedToStart", "AllowedToStart"]
_ACTIVE_STATES = ["Running", "Interrupted"]
_TRANSITIONS: list[tuple[str, str | list[str], str | None]] = [
    ("Store", INITIAL, "NotAllowedToStart"),
    ("StoreAndStart", INITIAL, "AllowedToStart"),
    ("Start", "NotAllowedToStart", "AllowedToStart"),
    ("RevokeStart", "AllowedToStart", "NotAllowedToStart"),
    ("Update", _PREPARED_STATES, None),
    ("Pause", "Running", "Interrupted.Suspended"),
    ("Resume", "Interrupted", "Running"),
    ("Stop", _ACTIVE_STATES, "Ended.Closed"),
    ("Abort", _PREPARED_STATES + _ACTIVE_STATES, "Aborted"),
    ("Cancel", _PREPARED_STATES, END),
    ("Clear", ["Ended", "Aborted"], END),
    ("Run", "AllowedToStart", "Running"),
    ("Complete", "Running", "Ended.Completed"),
    ("Fail", _ACTIVE_STATES, "Aborted"),
    ("Hold", "Running", "Interrupted.Held"),
    ("ResultUpdate", [*_ACTIVE_STATES, "Ended", "Aborted"], None),
]


class _PathState(NestedState):
    separator = "."  # state paths read "AllowedToStart.Ready", as in the observer hook


class _Machine(HierarchicalMachine):
    state_cls = _PathState


def _state_definitions() -> list[Any]:
    definitions: list[Any] = []
    for name in TOP_STATES:
        children = SUBSTATES.get(name)
        if children is None:
            definitions.append(name)
        elif name in _PREPARED_STATES:
            definitions.append({"name": name, "children": list(children), "initial": "Ready"})
        else:  # entered only through an explicit substate
            definitions.append({"name": name, "children": list(children)})
    return definitions


def _build_table() -> tuple[tuple[str, ...], dict[tuple[str, str], str]]:
    """Every (leaf state, trigger) the machine allows, with the state it leads to."""
    machine = _Machine(
        model=None,
        states=_state_definitions(),
        transitions=[
            {"trigger": trigger, "source": source, "dest": dest}
            for trigger, source, dest in _TRANSITIONS
        ],
        initial=INITIAL,
        auto_transitions=False,
    )
    leaves = tuple(
        name
        for name in machine.get_nested_state_names()
        if not any(other.startswith(name + ".") for other in machine.get_nested_state_names())
    )
    table: dict[tuple[str, str], str] = {}
    for state in leaves:
        table.update(_moves_from(machine, state))
    return leaves, table


def _moves_from(machine: _Machine, state: str) -> dict[tuple[str, str], str]:
    """Try every trigger on a probe in ``state``, with the library's per-step logging muted."""
    library_log = logging.getLogger("transitions")
    level = library_log.level
    library_log.setLevel(logging.WARNING)
    moves: dict[tuple[str, str], str] = {}
    try:
        for trigger in (*MES_METHODS, *CONTROL_TRIGGERS):
            probe = _Probe()
            machine.add_model(probe, initial=state)
            # Asked first: an event not allowed in the state would make the library warn.
            if probe.may_trigger(trigger) and probe.trigger(trigger):
                moves[(state, trigger)] = probe.state
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


LEAF_STATES, TRANSITIONS = _build_table()


def next_state(state: str, trigger: str) -> str | None:
    """Where ``trigger`` takes a job in ``state``; ``None`` when it is not allowed there."""
    return TRANSITIONS.get((state, trigger))


def top_state(state: str) -> str:
    return state.partition(".")[0]


def has_result(state: str) -> bool:
    """Ended or Aborted: the Job Response is final and the MES may Clear the job."""
    return top_state(state) in FINAL_TOP_STATES


def state_number(state: str) -> int:
    return TOP_STATES[top_state(state)]


def state_list(state: str) -> list[State]:
    """The ISA95StateDataType array of a state path: the top level, then the substate."""
    top, _, sub = state.partition(".")
    entries = [State(state_text=LocalizedText("en", top), state_number=TOP_STATES[top])]
    if sub:
        entries.append(
            State(
                browse_path=_substate_path(top, sub),
                state_text=LocalizedText("en", sub),
                state_number=SUBSTATES[top][sub],
            )
        )
    return entries


def _substate_path(top: str, sub: str) -> RelativePath:
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


def state_path(entries: Sequence[State]) -> str:
    """The state path an ISA95StateDataType array describes.

    Each entry is matched by its ``StateText`` (or, without text, by ``StateNumber`` within its
    level). ``ValueError`` when it names no state of this machine.
    """
    if not entries:
        raise ValueError("the state needs at least its top-level entry")
    top = _level_name(entries[0], TOP_STATES, "top-level state")
    if len(entries) == 1:
        return top
    if len(entries) > 2 or top not in SUBSTATES:
        raise ValueError(f"{top} has no substates here")
    return f"{top}.{_level_name(entries[1], SUBSTATES[top], f'substate of {top}')}"


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
