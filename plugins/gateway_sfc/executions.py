"""Reading and compare-and-swapping one job's execution state, and telling observers."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.errors import GatewayError
from gateway_sfc.context import EngineContext
from gateway_sfc.engine import Effects, Executor, Timer, TimerKind
from gateway_sfc.scripts import COMMIT
from gateway_sfc.snapshots import RecipeCache
from gateway_sfc.state import Execution, Phase, Status, dump_execution, load_execution

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

Apply = Callable[[Executor, Execution, float], Effects]
WaitStarted = Callable[[str, str], Awaitable[None]]


class ExecutionStore:
    """The CAS on ``sfc:exec:<job>`` and everything committed with it (work, timers, sets)."""

    def __init__(self, context: EngineContext, recipes: RecipeCache) -> None:
        self.context = context
        self.recipes = recipes
        self._commit: AsyncScript | None = None
        # Called after a write that made the job wait for an equipment event (the event router
        # then offers it the events that came early).
        self.wait_started: WaitStarted | None = None

    def start(self) -> None:
        """Called when the engine starts running: the store's client is new on every run."""
        self._commit = self.context.client.register_script(COMMIT)

    async def read(self, scope: str, job: str) -> Execution | None:
        text = await self.context.client.get(self.context.keys.execution(scope, job))
        return None if text is None else load_execution(text)

    async def exists(self, scope: str, job: str) -> bool:
        return bool(await self.context.client.exists(self.context.keys.execution(scope, job)))

    async def create(self, execution: Execution, effects: Effects) -> bool:
        """Write a new job's first state (``False``: another instance started it first)."""
        if not await self.write(execution, -1, effects):
            return False
        self.announce_steps(execution, {}, time.time())
        if waiting(execution):
            await self._wait_started(execution.scope, execution.job)
        return True

    async def mutate(self, scope: str, job: str, apply: Apply) -> None:
        """Read, apply, compare-and-swap; on a conflict, read again and re-apply."""
        settings = self.context.settings
        for _ in range(settings.max_cas_retries):
            execution = await self.read(scope, job)
            if execution is None:
                return  # never started, or ended long ago
            if execution.status is Status.ENDED:
                return
            executor = await self.recipes.executor(scope, job)
            was_waiting = waiting(execution)
            was_active = {name: node.entered_at for name, node in execution.nodes.items()}
            now = time.time()
            effects = apply(executor, execution, now)
            if not (effects.changed or effects.sends or effects.timers or effects.report):
                return
            if await self.write(execution, execution.version, effects):
                self.announce_steps(execution, was_active, now)
                if effects.reply is not None:
                    seconds, failed = effects.reply
                    self.context.metrics.replies.labels("error" if failed else "ok").observe(
                        seconds
                    )
                if waiting(execution) - was_waiting:
                    await self._wait_started(scope, job)
                return
        raise GatewayError(
            f"job {scope}/{job}: state kept changing under {settings.max_cas_retries} tries"
        )

    async def _wait_started(self, scope: str, job: str) -> None:
        if self.wait_started is not None:
            await self.wait_started(scope, job)

    def announce_steps(
        self, execution: Execution, was_active: dict[str, float], now: float
    ) -> None:
        """Tell observers which steps and branches became active or inactive (after a write)."""
        hook = self.context.gateway.plugins.hook.gateway_step_changed
        for node in sorted(was_active.keys() - execution.nodes.keys()):
            self.context.metrics.steps.labels(node).observe(now - was_active[node])
            hook(scope=execution.scope, job_order_id=execution.job, step=node, active=False)
        for node in sorted(execution.nodes.keys() - was_active.keys()):
            hook(scope=execution.scope, job_order_id=execution.job, step=node, active=True)

    async def write(self, execution: Execution, expected: int, effects: Effects) -> bool:
        scope, job = execution.scope, execution.job
        keys = self.context.keys
        work: list[list[str]] = []
        for action in effects.sends:
            attempt = str(execution.actions[action].attempt)
            work.append(["kind", "send", "job", job, "action", action, "attempt", attempt])
        if effects.report is not None:
            work.append(["kind", "report", "job", job])
        ended = execution.status is Status.ENDED
        ops = {
            "work": work,
            "timers": [[timer.due, timer_json(job, timer)] for timer in effects.timers],
            "waiting": bool(waiting(execution)) and not ended,
            "active": not ended,
            "job": job,
            "now": time.time(),
            "ttl": self.context.settings.ended_ttl_seconds if ended else 0,
        }
        execution.version = expected + 1 if expected >= 0 else 0
        redis_keys = [
            keys.execution(scope, job),
            keys.work(scope),
            keys.timers(scope),
            keys.waiting(scope),
            keys.active(scope),
        ]
        assert self._commit is not None, "the engine is not running"
        written = await self._commit(
            keys=redis_keys, args=[expected, dump_execution(execution), json.dumps(ops)]
        )
        return bool(written)


def waiting(execution: Execution) -> set[str]:
    """The job's ``pull_event`` actions waiting for an event."""
    return {run.name for run in execution.actions.values() if run.phase is Phase.WAITING}


def mark_ended(executor: Executor, execution: Execution, now: float) -> Effects:
    execution.status = Status.ENDED
    return Effects(changed=True)


def timer_json(job: str, timer: Timer) -> str:
    return json.dumps(
        {
            "job": job,
            "kind": timer.kind.value,
            "action": timer.action,
            "attempt": timer.attempt,
            "due": timer.due,
        },
        sort_keys=True,
    )


def timer_from_json(text: str) -> Timer:
    data = json.loads(text)
    return Timer(
        float(data["due"]), TimerKind(data["kind"]), str(data["action"]), int(data["attempt"])
    )
