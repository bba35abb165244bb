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

    async def forget_job(self, job: str) -> None:
        """The job's chart has ended (or will never run): its scope is kept as long as its
        ended state (a late reply still finds its job), then goes."""
        keys, ttl = self.context.keys, self.context.settings.ended_ttl_seconds
        async with self.context.client.pipeline(transaction=False) as pipe:
            pipe.expire(keys.job_scope(job), ttl)
            await pipe.execute()

    async def job_scope(self, job: str) -> str | None:
        scope = await self.context.client.get(self.context.keys.job_scope(job))
        return str(scope) if scope is not None else None
