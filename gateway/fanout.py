"""Fan-out: one action of a recipe sent to a set of equipment at once, with a policy.

A station with four identical nutrunners says "tighten on every nutrunner" with one action::

    "fan_out": {"members": "declared", "policy": "all"}

``members`` is who gets the command: ``"declared"`` (default) every equipment of the scope whose
configuration declares the action's type (``TypeIds``), a list of equipment IDs, or
``"params.<ID>"``, a job parameter holding such a list. The runtime fixes the members when the
job starts (``ActionSpec.members``) and sends one command per member at once, each its own
action run ``<action>@<member>`` with its own correlation id and timeout. ``policy`` decides the
action once every member answered (or earlier, when it can no longer be met): ``"all"``
(default) must succeed, ``"any"`` one must, an integer N at least N must. The action's result
is one entry per member, ``{"<member>": <its reply data, or {"error": ...}>}``, so conditions
read ``tighten.nr2.torque``; a policy not met fails the action (with every member's error), and
the action's own ``max_attempts`` runs the whole fan-out again.

Job management allocates every member to the job (declared members and listed ones; members
from a job parameter are known only when the job starts, and are not allocated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.recipefields import Fields
from gateway.routing import EquipmentUse

FAN_OUT_FIELDS = {"members", "policy"}
DECLARED = "declared"
_PARAMETER = "params."


@dataclass(frozen=True)
class FanOut:
    """Who an action goes to and how many must succeed."""

    members: tuple[str, ...] | None = None  # listed; None: declared or from a parameter
    parameter: str | None = None  # the job parameter listing them
    policy: str | int = "all"  # "all", "any", or at least this many

    def needed(self, count: int) -> int:
        """How many of ``count`` members must succeed."""
        if self.policy == "all":
            return count
        if self.policy == "any":
            return min(1, count)
        return int(self.policy)

    @property
    def declared(self) -> bool:
        return self.members is None and self.parameter is None


def load_fan_out(value: Any, where: str, problems: list[str]) -> FanOut | None:
    """The fan-out of recipe JSON ``value`` (at ``where``); problems are added, named."""
    fields = Fields.read(value, where, problems, FAN_OUT_FIELDS, "a JSON object {members, policy}")
    if fields is None:
        return None
    members, parameter = _members(value.get("members", DECLARED), fields.path("members"), problems)
    policy = value.get("policy", "all")
    if policy not in ("all", "any") and (
        isinstance(policy, bool) or not isinstance(policy, int) or policy < 1
    ):
        fields.problem(
            "policy",
            f"must be 'all', 'any' or a whole number >= 1 (at least that many), got {policy!r}",
        )
    elif isinstance(policy, int) and members is not None and policy > len(members):
        fields.problem("policy", f"at least {policy} of {len(members)} members can never succeed")
    if not fields.ok:
        return None
    return FanOut(members, parameter, policy)


def _members(
    value: Any, where: str, problems: list[str]
) -> tuple[tuple[str, ...] | None, str | None]:
    if value == DECLARED:
        return None, None
    if isinstance(value, str) and value.startswith(_PARAMETER) and len(value) > len(_PARAMETER):
        return None, value[len(_PARAMETER) :]
    if isinstance(value, list) and value:
        bad = [item for item in value if member_id_problem(item) is not None]
        if bad:
            problems.append(f"{where}: {member_id_problem(bad[0])}")
        elif len(set(value)) != len(value):
            problems.append(f"{where}: lists an equipment twice")
        return tuple(value), None
    problems.append(
        f"{where}: must be 'declared', 'params.<ID>' or a non-empty list of equipment IDs, "
        f"got {value!r}"
    )
    return None, None


def member_id_problem(member: Any) -> str | None:
    """Why ``member`` cannot be a fan-out member (its ID is part of correlation ids)."""
    if not isinstance(member, str) or not member:
        return f"an equipment ID must be a non-empty string, got {member!r}"
    if ":" in member or "@" in member:
        return f"equipment {member!r}: no ':' or '@' in a fan-out member's ID"
    return None


def member_name(action: str, member: str) -> str:
    """The action run of one member: ``tighten@nutrunner2``."""
    return f"{action}@{member}"


def split_member(name: str) -> tuple[str, str] | None:
    """``(action, member)`` of a member run's name, ``None`` for any other name."""
    action, at, member = name.partition("@")
    return (action, member) if at and action and member else None


def fan_out_uses(
    action: str, type_id: str, fan_out: FanOut, declared_by: str | None = None
) -> Sequence[EquipmentUse]:
    """What a fan-out action (or a step of a per-member pipeline) asks of equipment: each
    listed member, or every equipment that declares ``declared_by`` (default: its type; a
    pipeline's members declare its first step's); members from a parameter: nothing known
    before the job starts."""
    if fan_out.members is not None:
        return [
            EquipmentUse(member_name(action, member), type_id, member, command=True)
            for member in fan_out.members
        ]
    if fan_out.declared and (declared_by or type_id) == type_id:
        return [EquipmentUse(action, type_id, None, command=True, every=True)]
    return []
