"""The sequence recipe format: an ordered list of steps, some of them parallel blocks.

A recipe is JSON in a Work Master's ``Data`` (``DataSchema``: ``DATASCHEMA``)::

    {"name": "...", "on_error": "abort", "timeout_seconds": 30,
     "steps": [
        {"name": "position", "type_id": "com.example.position.v1", "equipment": "positioner"},
        {"par": [{"name": "tighten", ...}, {"name": "inspect", ...}]},
        {"name": "release", ...}
     ]}

Steps run one after the other; a ``par`` block sends all its commands at once and is done when
every one has succeeded (the ESW sequencer's ``par``). A command step completes on its
equipment's reply; its reply data is the job's result under the step's name. The format and
every field are described in ``schema.json`` beside this module.

``load_sequence`` checks everything before a job runs and names every problem at once, each as
``recipe.steps[1].par[0].timeout_seconds: ...``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.compensation import load_compensation
from gateway.conditions import Condition, ConditionError, parse_condition
from gateway.fanout import load_fan_out
from gateway.formats import ActionSpec, RecipeError
from gateway.pipelines import PIPELINE_STEP_FIELDS, load_pipeline
from gateway.recipefields import COMMAND_DEFAULTS, Fields, read_command
from gateway.recipefields import DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS  # the schema's

DATASCHEMA = "https://station-gateway.github.io/schemas/sequence-recipe/v1/"
"""The Work Master ``DataSchema`` of sequence recipes (the schema file's ``$id``)."""


class OnError(StrEnum):
    ABORT = "abort"  # the job goes to Aborted
    HOLD = "hold"  # the job goes to Interrupted.Held; the MES's Resume tries the step again


@dataclass(frozen=True)
class Command(ActionSpec):
    """One step: a command to equipment, done when the equipment replies without error.

    What the runtime sends is the ``ActionSpec`` (``spec()``; ``equipment`` None: the driver
    that serves ``type_id``); the rest is the sequence's own."""

    on_error: OnError = OnError.ABORT
    condition: Condition | None = None  # false when its turn comes: skipped (nothing sent)
    assertion: Condition | None = None  # false on its reply: the try failed, with its text
    continue_on_error: bool = False  # failed (after its tries): the sequence goes on


@dataclass(frozen=True)
class Block:
    """What runs at one position of the sequence: one command, or a ``par`` block of several."""

    name: str
    commands: tuple[Command, ...]
    parallel: bool = False
    # A par block whose command failed (after its own tries) is run again, all of it, up to
    # this many times in all, each run ``backoff_seconds`` after the failure.
    max_attempts: int = 1
    backoff_seconds: float = 0.0


@dataclass(frozen=True)
class SequenceRecipe:
    blocks: tuple[Block, ...]
    name: str | None = None
    description: str | None = None

    def command(self, name: str) -> Command:
        """The command step named ``name`` (``KeyError`` when there is none)."""
        for block in self.blocks:
            for command in block.commands:
                if command.name == name:
                    return command
        raise KeyError(name)

    def commands(self) -> Iterator[Command]:
        for block in self.blocks:
            yield from block.commands


RECIPE_FIELDS = {
    "name",
    "description",
    "steps",
    "on_error",
    "timeout_seconds",
    "max_attempts",
    "backoff_seconds",
}
# A command step's fields: a command's, as every format reads them, and the sequence's own.
OWN_FIELDS = {"on_error", "condition", "assertion", "continue_on_error", "compensation", "fan_out"}
COMMAND_FIELDS = {*COMMAND_DEFAULTS, *OWN_FIELDS}
PAR_FIELDS = {"name", "par", "max_attempts", "backoff_seconds"}
PIPELINE_FIELDS = {"name", "fan_out", "steps", "on_error", "continue_on_error"}
# What a pipeline's step may not have: the member is its equipment, the rest is its block's.
BLOCKS = sorted(COMMAND_FIELDS - PIPELINE_STEP_FIELDS)


def load_sequence(data: Any) -> SequenceRecipe:
    """The recipe in JSON ``data``; ``RecipeError`` lists every problem."""
    problems: list[str] = []
    fields = Fields.read(data, "recipe", problems, RECIPE_FIELDS, "a JSON object with 'steps'")
    if fields is None:
        raise RecipeError(problems)
    # The recipe's defaults of every step (``None``: wrong, and said so once per step too).
    defaults = {
        "on_error": fields.choice("on_error", OnError, "abort"),
        "timeout_seconds": fields.seconds("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        "max_attempts": fields.attempts(),
        "backoff_seconds": fields.seconds("backoff_seconds", 0.0, zero=True),
    }
    name = fields.text("name", optional=True)
    description = fields.text("description", optional=True)
    blocks: list[Block] = []
    for index, step in enumerate(fields.items("steps", "steps") or ()):
        block = _block(step, index, f"recipe.steps[{index}]", defaults, problems)
        if block is not None:
            blocks.append(block)
    _unique_names(blocks, problems)
    _known_steps(blocks, problems)
    if problems:
        raise RecipeError(problems)
    return SequenceRecipe(tuple(blocks), name, description)


def _block(
    step: Any, index: int, where: str, defaults: Mapping[str, Any], problems: list[str]
) -> Block | None:
    if not isinstance(step, Mapping):
        problems.append(f"{where}: must be a JSON object (a command step or a 'par' block)")
        return None
    if "steps" in step and "par" not in step:
        return _pipeline(step, index, where, defaults, problems)
    if "par" not in step:
        command = _command(step, where, defaults, problems)
        return None if command is None else Block(command.name, (command,))
    fields = Fields(step, where, problems, PAR_FIELDS)
    name = fields.name("name", f"par-{index + 1}")
    branches = step["par"]
    if not isinstance(branches, list) or len(branches) < 2:
        problems.append(f"{where}.par: must list at least two command steps to run in parallel")
        return None
    attempts = fields.attempts("max_attempts", 1)
    backoff = fields.seconds("backoff_seconds", 0.0, zero=True)
    commands = []
    for position, branch in enumerate(branches):
        inner = f"{where}.par[{position}]"
        if isinstance(branch, Mapping) and "par" in branch:
            problems.append(f"{inner}: a par block cannot hold another par block")
            continue
        if not isinstance(branch, Mapping):
            problems.append(f"{inner}: must be a JSON object (a command step)")
            continue
        command = _command(branch, inner, defaults, problems)
        if command is not None:
            commands.append(command)
    return Block(
        name or "par",
        tuple(commands),
        parallel=True,
        max_attempts=attempts or 1,
        backoff_seconds=backoff or 0.0,
    )


def _pipeline(
    step: Mapping[str, Any],
    index: int,
    where: str,
    defaults: Mapping[str, Any],
    problems: list[str],
) -> Block | None:
    """A per-member pipeline, ``{"name", "fan_out", "steps": [...]}``: one command of the
    sequence, whose steps the runtime runs for each member on its own (``gateway.pipelines``);
    the fan-out's policy decides the block, its result is per member its steps' by name."""
    fields = Fields(step, where, problems, PIPELINE_FIELDS)
    name = fields.name("name", f"pipeline-{index + 1}")
    fan_out = None
    if "fan_out" not in step:
        problems.append(f"{where}: a block of 'steps' runs per member: it needs a 'fan_out'")
    else:
        fan_out = load_fan_out(step["fan_out"], fields.path("fan_out"), problems)
    # Its steps' own: the member is their equipment, the rest is the block's.
    steps = load_pipeline(step["steps"], fields.path("steps"), problems, defaults, blocks=BLOCKS)
    on_error = fields.choice("on_error", OnError, defaults["on_error"])
    continue_on_error = fields.flag("continue_on_error", False)
    if not fields.ok or name is None or not steps:
        return None
    command = Command(
        name=name,
        type_id=steps[0].type_id,  # "declared" members declare the first step's type
        # The whole pipeline is bounded by its steps' waits (and their backoffs).
        timeout_seconds=sum(inner.longest_wait() for inner in steps),
        on_error=on_error or OnError.ABORT,
        side_effects=any(inner.side_effects for inner in steps),
        continue_on_error=bool(continue_on_error),
        fan_out=fan_out,
        pipeline=steps,
    )
    return Block(name, (command,))


def _command(
    step: Mapping[str, Any], where: str, defaults: Mapping[str, Any], problems: list[str]
) -> Command | None:
    fields = Fields(step, where, problems, COMMAND_FIELDS)
    spec = read_command(fields, defaults)
    on_error = fields.choice("on_error", OnError, defaults["on_error"])
    own = spec["name"]
    condition = _condition(step.get("condition"), fields.path("condition"), problems, own=None)
    assertion = _condition(step.get("assertion"), fields.path("assertion"), problems, own=own)
    continue_on_error = fields.flag("continue_on_error", False)
    if "fan_out" in step:
        spec["fan_out"] = load_fan_out(step["fan_out"], fields.path("fan_out"), problems)
        if "equipment" in step:
            fields.problem(
                "fan_out", "a fan-out step names no equipment (its members are its equipment)"
            )
    if "compensation" in step:
        if spec["side_effects"] is False:
            fields.problem(
                "compensation",
                "the step has side_effects false: it changes nothing that could be undone",
            )
        spec["compensation"] = load_compensation(
            step["compensation"],
            fields.path("compensation"),
            str(own),
            problems,
            timeout=spec["timeout_seconds"],
        )
    if not fields.ok:
        return None
    return Command(
        **spec,
        on_error=on_error or OnError.ABORT,
        condition=condition,
        assertion=assertion,
        continue_on_error=bool(continue_on_error),
    )


def _condition(value: Any, where: str, problems: list[str], *, own: str | None) -> Condition | None:
    """A step's condition (``own`` None: looked at before its command is sent) or assertion
    (``own``: the step, whose reply's fields it may name bare)."""
    if value is None:
        return None
    try:
        condition = parse_condition(value)
    except ConditionError as error:
        problems.append(f"{where}: {error.reason}")
        return None
    for reference in condition.references():
        if reference.kind == "elapsed":
            problems.append(f"{where}: step.elapsed is for SFC transitions, not sequence steps")
        elif reference.kind == "bare" and own is None:
            problems.append(
                f"{where}: {reference.name!r} names no result here: write <step>.<field> "
                "(a condition is looked at before the step's command is sent)"
            )
        elif reference.kind == "result" and reference.name == own:
            problems.append(f"{where}: name the step's own reply fields bare ({reference})")
    return condition


def _known_steps(blocks: list[Block], problems: list[str]) -> None:
    """A condition or assertion names the results of steps the recipe has."""
    names = {command.name for block in blocks for command in block.commands}
    for block in blocks:
        for command in block.commands:
            checked = (("condition", command.condition), ("assertion", command.assertion))
            for label, condition in checked:
                for reference in condition.references() if condition else ():
                    if reference.kind == "result" and reference.name not in names:
                        problems.append(
                            f"recipe.steps: step {command.name}'s {label} names "
                            f"{reference.name!r}, which is no step"
                        )


def _unique_names(blocks: list[Block], problems: list[str]) -> None:
    """Step names name results and correlation ids, block names progress: each used once."""
    seen: set[str] = set()
    for block in blocks:
        names = [command.name for command in block.commands]
        if block.parallel:
            names.insert(0, block.name)
        names.extend(
            command.compensation.name for command in block.commands if command.compensation
        )
        names.extend(inner.name for command in block.commands for inner in command.pipeline)
        for name in names:
            if name in seen:
                problems.append(f"recipe.steps: the name {name!r} is used twice")
            seen.add(name)
