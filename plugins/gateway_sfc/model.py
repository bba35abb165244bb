"""The SFC recipe model (IEC 61131-3 terms) and its loader.

A recipe is JSON in a Work Master's ``Data``. Both naming styles load: ``snake_case`` (as in
the reference document) and ``PascalCase`` (as in OPC UA JSON and the MicroDCS schema), also
mixed. Loading checks shapes and types only; ``gateway_sfc.validation`` checks the chart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import cattrs
from cattrs.cols import is_mutable_sequence, list_structure_factory

from gateway.errors import ValidationError
from gateway.formats import Interaction as Interaction

DATASCHEMA = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"


class Qualifier(StrEnum):
    """IEC 61131-3 action qualifiers, adapted to event-driven actions.

    N: runs while its step is active; the step waits for it.  P / P1: sent once on step
    entry; the step does not wait.  P0: sent once when the step is left.  S: set on entry,
    keeps running after the step until an R association of the same name resets it (the job
    waits for it before it ends).  R: resets the stored action of that name.  L: like N, but
    ends without error after ``time_seconds``.  D: like N, but starts ``time_seconds`` after
    step entry (not at all if the step is left before).
    """

    N = "N"
    P = "P"
    P0 = "P0"
    P1 = "P1"
    S = "S"
    R = "R"
    L = "L"
    D = "D"


class BranchType(StrEnum):
    SELECTION = "selection"  # OR: the highest-priority enabled path
    SIMULTANEOUS = "simultaneous"  # AND: every path, converging when all finished


class OnError(StrEnum):
    ABORT = "abort"  # the job goes to Aborted
    HOLD = "hold"  # the job goes to Interrupted.Held; MES Resume retries, Abort ends
    CONTINUE = "continue"  # the action ends with its error; its step may be left


@dataclass(frozen=True)
class RetryPolicy:
    """How often an action is tried, and how long to wait between tries."""

    max_attempts: int = 1
    backoff_seconds: float = 1.0
    backoff_multiplier: float = 2.0
    max_backoff_seconds: float = 60.0

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before try number ``attempt`` (2, 3, ...)."""
        delay = self.backoff_seconds * self.backoff_multiplier ** max(attempt - 2, 0)
        return float(min(delay, self.max_backoff_seconds))


@dataclass(frozen=True)
class Step:
    name: str
    initial: bool = False
    # The whole step run again when one of its actions failed (after the action's own tries):
    # every action it started is started afresh, after the policy's backoff.
    retry: RetryPolicy | None = None


@dataclass(frozen=True)
class Transition:
    source: str  # step or branch
    target: str  # step or branch
    condition: str = "always"
    priority: int = 0  # selection: lower number = higher priority


@dataclass(frozen=True)
class Action:
    """An action association: what a step does, and how (qualifier, interaction)."""

    name: str
    step: str
    interaction: Interaction
    type_id: str = ""  # required, but for a pipeline action (its steps have theirs)
    qualifier: Qualifier = Qualifier.N
    equipment: str | None = None  # target device; default: the action's ``type_id`` routing
    timeout_seconds: float | None = None
    time_seconds: float | None = None  # L: time limit, D: delay
    parameters: dict[str, Any] = field(default_factory=dict)
    retry: RetryPolicy | None = None  # default: the recipe's
    on_error: OnError | None = None  # default: the recipe's
    # Whether sending this command may change the product or equipment (reported on failure).
    side_effects: bool | None = None  # default: True for push_command, False for pull_event
    # What undoes it when the job fails (``gateway_sfc.compensation``), as the recipe says it.
    compensation: dict[str, Any] | None = None
    condition: str | None = None  # false when due: skipped (``gateway_sfc.guards``)
    assertion: str | None = None  # false on its reply: the try failed
    fan_out: dict[str, Any] | None = None  # to a set of equipment at once (``gateway.fanout``)
    # Steps each fan-out member runs on its own (``gateway_sfc.pipeline``), as recipe JSON.
    pipeline: list[Any] | None = None

    @property
    def has_side_effects(self) -> bool:
        if self.side_effects is not None:
            return self.side_effects
        return self.interaction is Interaction.PUSH_COMMAND


@dataclass(frozen=True)
class Branch:
    """A divergence: ``branches`` are paths, each a sequence of step or branch names."""

    name: str
    type: BranchType
    branches: list[list[str]]


@dataclass(frozen=True)
class Recipe:
    steps: list[Step]
    transitions: list[Transition] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
    conditions: dict[str, str] = field(default_factory=dict)  # named conditions
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_error: OnError = OnError.ABORT
    name: str | None = None
    description: str | None = None

    def step(self, name: str) -> Step | None:
        return next((step for step in self.steps if step.name == name), None)

    def branch(self, name: str) -> Branch | None:
        return next((branch for branch in self.branches if branch.name == name), None)

    def actions_of(self, step: str) -> list[Action]:
        return [action for action in self.actions if action.step == step]

    def transitions_from(self, source: str) -> list[Transition]:
        """Outgoing transitions, highest priority (lowest number) first, then file order."""
        outgoing = [t for t in self.transitions if t.source == source]
        return sorted(outgoing, key=lambda transition: transition.priority)

    def retry_of(self, action: Action) -> RetryPolicy:
        return action.retry or self.retry

    def on_error_of(self, action: Action) -> OnError:
        return action.on_error or self.on_error


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake_case(name: str) -> str:
    """``TimeoutSeconds`` -> ``timeout_seconds``; ``TypeId`` / ``TypeID`` -> ``type_id``."""
    if "_" in name or name.islower():
        return name.lower()
    return _CAMEL_BOUNDARY.sub("_", name.replace("ID", "Id")).lower()


# Mappings whose keys are the recipe author's own names, not field names, stay untouched.
_FREE_FORM_KEYS = frozenset({"parameters", "conditions"})


def normalize_keys(value: Any) -> Any:
    """Every field name as snake_case, recursively (values of free-form maps kept as given)."""
    if isinstance(value, Mapping):
        normalized: dict[str, Any] = {}
        for key, item in value.items():
            name = snake_case(str(key))
            normalized[name] = item if name in _FREE_FORM_KEYS else normalize_keys(item)
        return normalized
    if isinstance(value, list):
        return [normalize_keys(item) for item in value]
    return value


def _strict(kind: type[Any], expected: str) -> Any:
    """A structure hook that refuses what is not already of ``kind`` (no ``bool("no")``)."""

    def structure(value: Any, _: type[Any]) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise ValueError(f"expected {expected}, got a boolean")
        if not isinstance(value, kind):
            raise ValueError(f"expected {expected}, got {type(value).__name__}")
        return value

    return structure


def _to_float(value: Any, _: type[Any]) -> float:
    return float(_strict((int, float), "a number")(value, float))  # type: ignore[arg-type]


def _to_enum(value: Any, enum: type[StrEnum]) -> StrEnum:
    return enum(_strict(str, "a string")(value, str))


def _strict_list(kind: Any, converter: cattrs.Converter) -> Any:
    """Lists must be lists: a string would otherwise be read character by character."""
    inner = list_structure_factory(kind, converter)

    def structure(value: Any, type_: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {type(value).__name__}")
        return inner(value, type_)

    return structure


_converter = cattrs.Converter(forbid_extra_keys=True)
_converter.register_structure_hook(bool, _strict(bool, "true or false"))
_converter.register_structure_hook(int, _strict(int, "an integer"))
_converter.register_structure_hook(str, _strict(str, "a string"))
_converter.register_structure_hook(float, _to_float)
_converter.register_structure_hook_factory(is_mutable_sequence, _strict_list)
# The hook for ``str`` would also catch the StrEnum fields; theirs are more specific.
for _enum in (Qualifier, Interaction, BranchType, OnError):
    _converter.register_structure_hook(_enum, _to_enum)


def load_recipe(data: Any) -> Recipe:
    """A ``Recipe`` from JSON data; ``ValidationError`` names the element that does not fit."""
    if not isinstance(data, Mapping):
        raise ValidationError("recipe", "must be a JSON object")
    try:
        return _converter.structure(normalize_keys(data), Recipe)
    except cattrs.BaseValidationError as error:
        # cattrs formats each problem as "<what> @ <path>"; the path names the element.
        problems = [
            tuple(reversed(text.rsplit(" @ ", 1))) if " @ " in text else ("recipe", text)
            for text in cattrs.transform_error(error, path="recipe")
        ]
        (element, first), *others = problems
        reason = "; ".join([first, *(f"{path}: {what}" for path, what in others)])
        raise ValidationError(element, reason) from None


def unstructure_recipe(recipe: Recipe) -> dict[str, Any]:
    """The recipe as snake_case JSON data."""
    data: dict[str, Any] = _converter.unstructure(recipe)
    return data
