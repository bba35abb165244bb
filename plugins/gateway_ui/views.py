"""What the pages and the JSON API show, gathered through the host's public API only.

Jobs come from job management (``gateway.job_control``), a running job's progress and its
chart from the recipe interpreter when it is a ``gateway.recipes.RecipeViewer``, the trace from
``gateway_ui.trace``. Everything is read fresh from the store on each call, so any instance
serves any viewer.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.errors import ValidationError
from gateway.recipes import JobSummary, RecipeJob, RecipeProgress, RecipeViewer
from gateway.store import Store, check_scope

if TYPE_CHECKING:
    from gateway.phases import ServicePhase


class NotFound(Exception):
    """The scope or job asked for does not exist (HTTP 404)."""


class UiData:
    def __init__(self, gateway: ServicePhase) -> None:
        self.gateway = gateway

    @property
    def store(self) -> Store:
        store = self.gateway.store
        if store is None:
            raise NotFound("no store: the gateway keeps no jobs")
        return store

    async def scopes(self) -> list[dict[str, Any]]:
        """Every known scope with its jobs counted by top-level state, and online or not."""
        rows = []
        control = self.gateway.job_control
        for scope in sorted(await self.store.known_scopes()):
            jobs = await control.jobs(scope)
            counts = Counter(job.state.top.value for job in jobs)
            online = (await control.queue(scope)).online
            rows.append(
                {
                    "scope": scope,
                    "jobs": len(jobs),
                    "states": dict(sorted(counts.items())),
                    "online": online,
                }
            )
        return rows

    async def known_scope(self, scope: str) -> str:
        """``scope`` if the store knows it (``NotFound`` otherwise): nothing is followed or
        made for a scope a visitor names."""
        if check(scope) not in await self.store.known_scopes():
            raise NotFound(f"no scope {scope!r}")
        return scope

    async def queue(self, scope: str) -> dict[str, Any]:
        """The scope's queue: online state, capacity, running jobs, waiting jobs in order."""
        queue = await self.gateway.job_control.queue(check(scope))
        return {
            "online": queue.online,
            "reason": queue.reason,
            "capacity": queue.capacity,
            "running": [
                {"job_order_id": job, "equipment": list(equipment)}
                for job, equipment in sorted(queue.running.items())
            ],
            "waiting": [dataclasses.asdict(entry) for entry in queue.waiting],
            "blocked": [
                {"equipment": equipment, "reason": reason}
                for equipment, reason in sorted(queue.blocked.items())
            ],
        }

    async def jobs(self, scope: str) -> list[dict[str, Any]]:
        """The scope's jobs, highest priority first."""
        return [summary_json(job) for job in await self.gateway.job_control.jobs(check(scope))]

    async def job(self, scope: str, job: str) -> dict[str, Any]:
        """A job: its summary, Job Response and the recipe's progress (``NotFound``)."""
        control = self.gateway.job_control
        summary = await control.summary(check(scope), job)
        if summary is None:
            raise NotFound(f"no job {job!r} in scope {scope!r}")
        view = {"scope": scope, **summary_json(summary)}
        view["response"] = await control.response(scope, job)
        view["progress"] = progress_json(await self.progress(scope, job))
        view["server_time"] = time.time()
        return view

    async def live(self, scope: str, job: str) -> dict[str, Any]:
        """What a job page refreshes on each change: state, progress, response."""
        control = self.gateway.job_control
        return {
            "state": await control.state(scope, job),
            "response": await control.response(scope, job),
            "progress": progress_json(await self.progress(scope, job)),
            "server_time": time.time(),
        }

    async def progress(self, scope: str, job: str) -> RecipeProgress | None:
        viewer = await self._viewer(scope, job)
        return None if viewer is None else await viewer.progress(scope, job)

    async def chart(self, scope: str, job: str) -> str | None:
        """The job's chart as SVG, its active steps lit; ``None`` when it cannot be drawn."""
        recipe_job = await self.gateway.job_control.job(scope, job)
        viewer = None if recipe_job is None else self._viewer_for(recipe_job)
        if recipe_job is None or viewer is None:
            return None
        progress = await viewer.progress(scope, job)
        active = {step.name for step in progress.active} if progress is not None else set()
        try:
            return viewer.render_svg(recipe_job.recipe, active)
        except ValidationError:
            return None

    async def _viewer(self, scope: str, job: str) -> RecipeViewer | None:
        recipe_job = await self.gateway.job_control.job(scope, job)
        return None if recipe_job is None else self._viewer_for(recipe_job)

    def _viewer_for(self, recipe_job: RecipeJob) -> RecipeViewer | None:
        interpreter: object = self.gateway.recipe_interpreters.get(recipe_job.dataschema or "")
        return interpreter if isinstance(interpreter, RecipeViewer) else None


def check(scope: str) -> str:
    try:
        return check_scope(scope)
    except ValidationError as error:
        raise NotFound(str(error)) from None


def summary_json(summary: JobSummary) -> dict[str, Any]:
    return dataclasses.asdict(summary)


def progress_json(progress: RecipeProgress | None) -> Mapping[str, Any] | None:
    return None if progress is None else dataclasses.asdict(progress)
