"""Routing by type: the command and event types configured equipment declares, per scope.

The MES declares them on ``config.equipment`` as an ISA-95 property of the equipment::

    {"ID": "tightener", "Properties": [
        {"ID": "TypeIds", "Value": ["com.example.station.tighten.v1", "...torque_result.v1"]}]}

(the property ID in any case, e.g. ``TypeIDs``). A PUT replaces what that equipment declares
(none without the property), a DELETE forgets it. Several equipment may declare one type: a
fan-out (``gateway.fanout``) goes to each of them; an action routed by that type alone is
refused, naming them (``gateway.routing.route``), so routing never has to guess.

Stored as one JSON document per scope, ``{p}:{scope}:config:equipmenttypes`` (equipment ->
types), changed under WATCH so concurrent configuration events cannot both take one type.
``StationTypes`` is the ``gateway.equipment.EquipmentDirectory`` the equipment hub routes by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.exceptions import WatchError

from gateway.errors import GatewayError, ValidationError
from gateway.store import ScopeTransaction, Store
from gateway_jobs.model import Equipment

TYPE_IDS = "TypeIds"
_TYPE_IDS_NAMES = frozenset({"typeids"})
EQUIPMENT_TYPES = "equipmenttypes"
_ATTEMPTS = 20


def declared_types(equipment: Equipment, index: int) -> list[str] | None:
    """The types ``equipment`` declares (``None``: it has no ``TypeIds`` property)."""
    for number, prop in enumerate(equipment.properties or []):
        if prop.id.lower() not in _TYPE_IDS_NAMES:
            continue
        value = prop.value
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValidationError(
                f"data[{index}].Properties[{number}].Value",
                f"{TYPE_IDS} must be a list of CloudEvent types (non-empty strings)",
            )
        return list(dict.fromkeys(value))
    return None


class StationTypes:
    """The types each scope's configured equipment declares."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def key(self, scope: str) -> str:
        return self.store.keys.scoped(scope, "config", EQUIPMENT_TYPES)

    async def declared(self, scope: str) -> dict[str, list[str]]:
        """Equipment -> the types it declares."""
        document = await self.store.get_json(self.key(scope))
        return document if isinstance(document, dict) else {}

    async def declaring(self, scope: str, type_id: str) -> Sequence[str]:
        """``gateway.equipment.EquipmentDirectory``."""
        declared = await self.declared(scope)
        return sorted(equipment for equipment, types in declared.items() if type_id in types)

    async def change(
        self,
        scope: str,
        put: Mapping[str, list[str] | None],
        deleted: Sequence[str],
        also: Callable[[ScopeTransaction], None] = lambda transaction: None,
    ) -> list[str]:
        """Apply a PUT (``put``: equipment -> declared types, ``None``: none) or a DELETE
        (``deleted``), and ``also``'s writes in the same transaction; returns the problems
        (none: several equipment may declare one type)."""
        key = self.key(scope)
        for _ in range(_ATTEMPTS):
            try:
                async with self.store.transaction(scope, watch=[key]) as transaction:
                    document = await transaction.get_json(key)
                    current: dict[str, list[str]] = document if isinstance(document, dict) else {}
                    wanted = {name: types for name, types in put.items() if types}
                    updated = {
                        name: types
                        for name, types in current.items()
                        if name not in put and name not in deleted
                    }
                    updated.update(wanted)
                    if updated != current:
                        transaction.set_json(key, updated)
                    also(transaction)
                return []
            except WatchError:
                continue
        raise GatewayError(f"equipment types of scope {scope!r}: too many concurrent changes")


def property_types(items: Sequence[Any]) -> dict[str, list[str] | None]:
    """Equipment ID -> the types a PUT of ``items`` declares (``None``: no ``TypeIds``)."""
    return {item.id: declared_types(item, index) for index, item in enumerate(items)}
