"""The scopes this instance works for: adopted from the global set, or when a job starts."""

from __future__ import annotations

import logging

import anyio
from redis.exceptions import ResponseError

from gateway_runtime.context import EngineContext
from gateway_runtime.keys import GROUP

log = logging.getLogger(__name__)


def is_nogroup(error: Exception) -> bool:
    """The stream or its consumer group is gone (XREADGROUP, XAUTOCLAIM refuse with NOGROUP)."""
    return isinstance(error, ResponseError) and str(error).startswith("NOGROUP")


class ScopeRegistry:
    """Known scopes (each with its work stream and consumer group), and job -> scope."""

    def __init__(self, context: EngineContext) -> None:
        self.context = context
        self.scopes: set[str] = set()
        self._scope_added: anyio.Event | None = None

    def start(self) -> None:
        """Called when the engine starts running (events belong to the running event loop)."""
        self._scope_added = anyio.Event()

    async def members(self, key: str) -> set[str]:
        return {str(member) for member in await self.context.client.smembers(key)}

    async def adopt_known(self) -> None:
        """Adopt every scope that ever ran a job (at start)."""
        for scope in await self.members(self.context.keys.scopes):
            await self.adopt(scope, announce=False)

    async def adopt(self, scope: str, *, announce: bool) -> None:
        client = self.context.client
        try:
            # Id 0: entries written before the group existed are delivered too.
            await client.xgroup_create(self.context.keys.work(scope), GROUP, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        if announce:
            await client.sadd(self.context.keys.scopes, scope)
        self.scopes.add(scope)
        if self._scope_added is not None:  # wake a read loop waiting for its first scope
            self._scope_added.set()

    async def restore(self) -> None:
        """The store lost the work streams' consumer groups (a Redis restart without its data):
        create them again, and announce the scopes again so other instances find them."""
        log.warning("recipe runtime: the store lost its work streams' groups; creating them again")
        for scope in list(self.scopes):
            await self.adopt(scope, announce=True)

    async def discover(self) -> None:
        """Adopt scopes other instances started jobs in."""
        for scope in await self.members(self.context.keys.scopes):
            if scope not in self.scopes:
                log.info("recipe runtime: new scope %s", scope)
                await self.adopt(scope, announce=False)

    async def wait_for_first(self) -> None:
        """Wait (at most one discovery interval) for a first scope to be adopted."""
        assert self._scope_added is not None
        with anyio.move_on_after(self.context.settings.scope_poll_seconds):
            await self._scope_added.wait()

    async def job_scope(self, job: str) -> str | None:
        """The scope of a job whose reply or event does not say it: where its execution state
        is (it lasts ``ended_ttl_seconds`` after the job's end, so a late reply still finds its
        job), else where job management holds it (an event may come before the job's start).
        One pipelined look per scope known; only for messages that do not name their scope."""
        known = sorted(self.scopes)
        found = await self._holding(job, known)
        if found is None:
            others = sorted(await self.members(self.context.keys.scopes) - set(known))
            found = await self._holding(job, others)
        return found

    async def _holding(self, job: str, scopes: list[str]) -> str | None:
        if not scopes:
            return None
        keys = self.context.keys
        async with self.context.client.pipeline(transaction=False) as pipe:
            for scope in scopes:
                pipe.exists(keys.execution(scope, job))
            found = await pipe.execute()
        for scope, exists in zip(scopes, found, strict=True):
            if exists:
                return scope
        control = self.context.gateway.job_control
        for scope in scopes:
            if await control.state(scope, job) is not None:
                return scope
        return None
