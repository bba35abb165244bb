"""Taking entries from the work streams: this instance's own, orphans of dead instances, timers.

An entry is acknowledged (and deleted) once handled; one that failed stays pending and is
handed to another instance by XAUTOCLAIM after ``claim_idle_seconds``. A failure that may pass
(``gateway.resilience.is_transient``: the store or the broker away) is retried in place with
backoff until it succeeds (or the instance stops, and then another instance claims the entry),
so an outage delays work but never drops it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup

from gateway.equipment import CorrelationId
from gateway.errors import ValidationError
from gateway.logs import log_context
from gateway.resilience import is_transient
from gateway_runtime.context import EngineContext
from gateway_runtime.keys import GROUP, scope_of_stream
from gateway_runtime.scopes import ScopeRegistry, is_nogroup
from gateway_runtime.scripts import ACKNOWLEDGE, FIRE_DUE

log = logging.getLogger(__name__)

StreamEntry = tuple[str, dict[str, str] | None]  # what the text-decoding client returns
Handler = Callable[[str, Mapping[str, str]], Awaitable[None]]


class WorkConsumer:
    def __init__(self, context: EngineContext, scopes: ScopeRegistry, handle: Handler) -> None:
        self.context = context
        self.scopes = scopes
        self.handle = handle
        self._fire_due: Any = None
        self._acknowledge_entry: Any = None
        self._slots: anyio.Semaphore | None = None
        self._wake_at = 0.0  # when the timers are looked at next (``timers``)
        self._fired_at = 0.0
        self._woken: anyio.Event | None = None

    def start(self) -> None:
        """Called when the engine starts running (the client and event loop exist by then)."""
        self._fire_due = self.context.client.register_script(FIRE_DUE)
        self._acknowledge_entry = self.context.client.register_script(ACKNOWLEDGE)
        self._slots = anyio.Semaphore(self.context.settings.max_concurrent_items)
        self._wake_at = 0.0
        self._woken = anyio.Event()

    async def read_loop(self, handlers: TaskGroup) -> None:
        """Read work entries for ever; a store outage fails ``recipe-runtime.read`` meanwhile."""
        resilience = self.context.gateway.resilience
        await resilience.retry(
            "recipe-runtime.read", lambda: self._read_backlog(handlers), logger=log
        )
        await resilience.forever(
            "recipe-runtime.read", lambda: self._read_once(handlers), logger=log
        )

    async def _read_once(self, handlers: TaskGroup) -> None:
        if not self.scopes.scopes:
            await self.scopes.wait_for_first()
            return
        streams = {self.context.keys.work(scope): ">" for scope in self.scopes.scopes}
        # A scope adopted meanwhile joins the next read: at most a scope poll later, as a scope
        # another instance started is adopted. (Blocking longer than that costs nothing: an
        # entry ends the block; shorter, an idle instance reads ten times a second.)
        block_ms = max(1, int(self.context.settings.scope_poll_seconds * 1000))
        for stream, batch in await self._read_group(streams, block_ms=block_ms):
            for entry_id, fields in batch:
                if fields:
                    await self._take(handlers, stream, entry_id, fields)

    async def _read_backlog(self, handlers: TaskGroup) -> None:
        """Entries handed to this consumer name before a restart and never acknowledged."""
        for scope in list(self.scopes.scopes):
            stream, after = self.context.keys.work(scope), "0"
            while batches := await self._read_group({stream: after}):
                batch = batches[0][1]
                if not batch:
                    break
                for entry_id, fields in batch:
                    after = entry_id
                    if fields:
                        await self._take(handlers, stream, entry_id, fields)

    async def _read_group(
        self, streams: dict[str, str], block_ms: int | None = None
    ) -> list[tuple[str, list[StreamEntry]]]:
        try:
            # Scopes are slots of their own: on a Cluster the store pipelines one read per
            # scope (one round trip per node) instead of one XREADGROUP over every stream.
            return await self.context.store.read_streams(
                streams, group=(GROUP, self.context.consumer), count=100, block_ms=block_ms
            )
        except Exception as error:
            if not is_nogroup(error):
                raise
            await self.scopes.restore()  # nothing was handed out: the next read gets it
            return []

    async def claim_orphans(self, handlers: TaskGroup) -> None:
        idle_ms = int(self.context.settings.claim_idle_seconds * 1000)
        for scope in list(self.scopes.scopes):
            stream = self.context.keys.work(scope)
            try:
                reply = await self.context.client.xautoclaim(
                    stream, GROUP, self.context.consumer, idle_ms, start_id="0-0", count=100
                )
            except Exception as error:
                if not is_nogroup(error):
                    raise
                await self.scopes.restore()
                return
            entries = cast(list[StreamEntry], reply[1])
            for entry_id, fields in entries:
                if fields:
                    log.info("SFC engine: claimed orphaned entry %s of %s", entry_id, scope)
                    await self._take(handlers, stream, entry_id, fields)

    async def _take(
        self, handlers: TaskGroup, stream: str, entry_id: str, fields: dict[str, str]
    ) -> None:
        assert self._slots is not None
        await self._slots.acquire()
        handlers.start_soon(self._handle_entry, stream, entry_id, fields)

    async def _handle_entry(self, stream: str, entry_id: str, fields: dict[str, str]) -> None:
        assert self._slots is not None
        scope = scope_of_stream(stream)
        job = fields.get("job")
        correlation = (
            str(CorrelationId(job, fields["action"], int(fields["attempt"])))
            if job and "attempt" in fields
            else None
        )
        gateway = self.context.gateway
        resilience, stopping = gateway.resilience, gateway.stopping
        try:
            with log_context(scope=scope, job=job, correlationid=correlation):
                await resilience.retry(
                    "recipe-runtime.work",
                    lambda: self.handle(scope, fields),
                    stop=stopping,
                    logger=log,
                )
                await resilience.retry(
                    "recipe-runtime.work",
                    lambda: self._acknowledge(stream, entry_id),
                    stop=stopping,
                    logger=log,
                )
        except (ValidationError, KeyError, ValueError) as error:
            # The entry itself is wrong: retrying cannot help, so say so and drop it.
            log.error("SFC work entry %s of %s dropped: %s (%s)", entry_id, scope, error, fields)
            with contextlib.suppress(Exception):  # else claimed again later, and dropped then
                await self._acknowledge(stream, entry_id)
        except Exception as error:
            if is_transient(error):  # stopping: another instance claims the entry
                log.info("SFC work entry %s of %s left pending: %s", entry_id, scope, error)
            else:
                log.exception("SFC work entry %s of %s failed; it will be retried", entry_id, scope)
        finally:
            self._slots.release()

    async def _acknowledge(self, stream: str, entry_id: str) -> None:
        await self._acknowledge_entry(keys=[stream], args=[GROUP, entry_id])

    def due_at(self, due: float) -> None:
        """A commit here set a timer, or a command's deadline to be confirmed sent, due then:
        the timers are looked at then (``timers``), not only at the next idle look."""
        due = max(due, self._fired_at + self.context.settings.timer_poll_seconds)
        if due < self._wake_at and self._woken is not None:
            self._wake_at = due
            self._woken.set()

    async def timers(self) -> None:
        """Fire what is due, then wait for the next due time this instance knows of: the
        earliest left in the scopes' sets, one its own commits set since (``due_at``), and at
        the latest a scope poll from now, for the timers of an instance that died (they fire
        that late at most). Not a look every ``timer_poll_seconds`` (twenty a second) while
        nothing is due; two looks stay that far apart."""
        settings = self.context.settings
        next_due = await self.fire_due_timers()
        now = self._fired_at = time.time()
        latest = now + max(settings.scope_poll_seconds, settings.timer_poll_seconds)
        self._wake_at = max(now + settings.timer_poll_seconds, min(next_due, latest))
        while (delay := self._wake_at - time.time()) > 0:
            self._woken = anyio.Event()
            with anyio.move_on_after(delay):
                await self._woken.wait()

    async def fire_due_timers(self) -> float:
        """Move due timers, and commands whose publication was not confirmed in time, of every
        scope to its work stream; the earliest due time left (``inf``: none)."""
        now = time.time()
        keys = self.context.keys
        next_due = math.inf
        for scope in list(self.scopes.scopes):
            due = [keys.timers(scope), keys.outbox(scope), keys.work(scope)]
            _, left = await self._fire_due(keys=due, args=[now, 100])
            if left:
                next_due = min(next_due, float(left))
        return next_due
