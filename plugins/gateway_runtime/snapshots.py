"""The program each job runs, fixed when it started, compiled once and kept in memory."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gateway.compensation import compensations
from gateway.equipment import CorrelationId, EquipmentCommand
from gateway.formats import ActionSpec, Executor, Program
from gateway_runtime.compensation import member_compensation_spec
from gateway_runtime.context import EngineContext
from gateway_runtime.fanout import FannedProgram, member_spec
from gateway_runtime.memory import JobMemory, Lru


@dataclass(frozen=True)
class Snapshot:
    """What a job runs: its recipe (of format ``dataschema``) compiled with the equipment its
    actions were routed to, and its parameters (all fixed when it started)."""

    program: Program
    parameters: Mapping[str, Any]
    recipe: Any
    dataschema: str
    run: str = ""  # the job's run it belongs to (``Execution.run``)
    equipment: Mapping[str, str] = field(default_factory=dict)  # routed by type at start
    version: str = ""  # ``""``: as the job started; an edit's recipe version (``Execution.recipe``)
    members: Mapping[str, list[str]] = field(default_factory=dict)  # fan-outs, fixed at start

    def action(self, name: str) -> ActionSpec:
        """The program's action or compensation of that name (``KeyError``: none)."""
        spec = self.spec(name)
        if spec is None:
            raise KeyError(name)
        return spec

    def spec(self, name: str) -> ActionSpec | None:
        """The program's action or compensation of that name, if it has one."""
        spec = self.program.actions.get(name)
        if spec is None and name in self._compensations:
            spec = self._compensations[name][1]
        if spec is None:
            spec = member_spec(self.program, name) or member_compensation_spec(self.program, name)
        return spec

    def command(self, scope: str, job: str, name: str, attempt: int) -> EquipmentCommand:
        """The command of try ``attempt`` of action ``name`` (``KeyError``: no such action),
        the same each time it is sent again."""
        action = self.action(name)
        return EquipmentCommand(
            correlation_id=str(CorrelationId(job, name, attempt)),
            type=action.type_id,
            equipment=action.equipment,
            scope=scope,
            job_order_id=job,
            action=name,
            parameters=action.parameters,
            job_parameters=self.parameters,
            timeout_seconds=action.timeout_seconds,
        )

    @cached_property
    def _compensations(self) -> dict[str, tuple[str, ActionSpec]]:
        return compensations(self.program)

    def document(self) -> str:
        """The snapshot as stored, written with the job's first state."""
        return json.dumps(
            {
                "dataschema": self.dataschema,
                "recipe": self.recipe,
                "parameters": self.parameters,
                "run": self.run,
                "equipment": self.equipment,
                "version": self.version,
                "members": self.members,
            }
        )


class RecipeCache:
    """Reads job snapshots, keeping those of the jobs in progress (``memory``) and the most
    recently used compiled programs."""

    def __init__(self, context: EngineContext, memory: JobMemory) -> None:
        self.context = context
        self._snapshots: Lru[tuple[str, str], Snapshot] = memory.cache()
        # Jobs of one Work Master run the same recipe: compile it once (key: format and text).
        self._programs: Lru[tuple[str, str], Program] = Lru(
            lambda: context.settings.chart_cache_size
        )

    def program(self, dataschema: str, recipe: Any) -> Program:
        """The compiled program of ``recipe`` (``RecipeError``: it cannot run)."""
        key = (dataschema, json.dumps(recipe, sort_keys=True, default=str))
        program = self._programs.get(key)
        if program is None:
            program = self.context.format(dataschema).compile(recipe)
            self._programs.put(key, program)
        return program

    def snapshot(
        self,
        dataschema: str,
        recipe: Any,
        parameters: Mapping[str, Any],
        run: str,
        equipment: Mapping[str, str],
        version: str = "",
        members: Mapping[str, list[str]] | None = None,
    ) -> Snapshot:
        program = self.program(dataschema, recipe)
        if equipment:
            program = program.bind(equipment)
        if members:
            program = FannedProgram(program, members)
        return Snapshot(
            program,
            parameters,
            recipe,
            dataschema,
            run,
            dict(equipment),
            version,
            dict(members or {}),
        )

    def parse(self, text: str | bytes) -> Snapshot:
        """A snapshot from its stored document (``Snapshot.document``), not kept."""
        data = json.loads(text)
        return self.snapshot(
            data["dataschema"],
            data["recipe"],
            data["parameters"],
            data["run"],
            data["equipment"],
            data["version"],
            data["members"],
        )

    def keep(self, scope: str, job: str, snapshot: Snapshot) -> None:
        """The snapshot of a job this instance just started."""
        self._keep((scope, job), snapshot)

    async def get(
        self, scope: str, job: str, run: str | None = None, version: str | None = None
    ) -> Snapshot:
        """The job's snapshot; with ``run``, the one kept in memory only if it is that run's
        (another instance may have started the job again under the same id meanwhile), with
        ``version`` only if it is that version of its recipe (another instance edited it)."""
        key = (scope, job)
        kept = self._snapshots.get(key)
        if (
            kept is not None
            and (run is None or kept.run == run)
            and (version is None or kept.version == version)
        ):
            return kept
        return await self.read(scope, job)

    async def read(self, scope: str, job: str) -> Snapshot:
        """The job's snapshot as stored (and kept from now on)."""
        text = await self.context.client.get(self.context.keys.recipe(scope, job))
        if text is None:
            raise ValueError(f"job {scope}/{job} has an execution state but no recipe snapshot")
        snapshot = self.parse(text)
        key = (scope, job)
        self._keep(key, snapshot)
        return snapshot

    def _keep(self, key: tuple[str, str], snapshot: Snapshot) -> None:
        self._snapshots.put(key, snapshot)

    def forget(self, scope: str, job: str) -> None:
        """The job ended: its snapshot is not needed any more."""
        self._snapshots.pop((scope, job))

    async def executor(
        self, scope: str, job: str, run: str | None = None, version: str | None = None
    ) -> Executor:
        """An executor for the job's program and parameters (``run``, ``version``: as for
        ``get``)."""
        snapshot = await self.get(scope, job, run, version)
        return self.context.executor(snapshot.program, snapshot.parameters)
