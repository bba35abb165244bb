"""Adding entries to a scope's work stream (the producer side; ``consumer`` takes them)."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.recipes import JobCommand
from gateway_runtime.context import EngineContext
from gateway_runtime.scopes import ScopeRegistry


class WorkQueue:
    def __init__(self, context: EngineContext, scopes: ScopeRegistry) -> None:
        self.context = context
        self.scopes = scopes

    async def enqueue(self, scope: str, fields: Mapping[str, str]) -> None:
        """Add a work entry for ``scope``, making sure the scope is known and has its group."""
        if scope not in self.scopes.scopes:
            await self.scopes.adopt(scope, announce=True)
        await self.context.client.xadd(self.context.keys.work(scope), dict(fields))  # type: ignore[arg-type]

    async def start(self, scope: str, job: str) -> None:
        """A start entry: the job's start, handled by whichever instance reads it (a start
        that failed where the job was admitted, a start reconciliation repairs)."""
        await self.enqueue(scope, {"kind": "start", "job": job})

    async def command(self, scope: str, job: str, command: JobCommand, run: str) -> None:
        """The MES's ``command`` for run ``run`` of the job (``Execution.run``): a run of the
        job id stored again after it never takes it."""
        fields = {"kind": "command", "job": job, "command": command.value, "run": run}
        await self.enqueue(scope, fields)

    async def report(self, scope: str, job: str) -> None:
        """Report the job's chart's end to job control again (a finishing chart's report)."""
        await self.enqueue(scope, {"kind": "report", "job": job})
