"""The Sparkplug service: one speaker per scope, on every instance (one speaks, the others wait).

Scopes are ``sparkplug.scopes``, or every scope the store knows, looked at again every
``poll_seconds`` so a scope's first job brings its edge node up. A scope whose id is no valid
Sparkplug id (``/``, ``+``, ``#``) is left out, with a warning.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gateway_sparkplug.connection import BrokerAddress
from gateway_sparkplug.metrics import SparkplugMetrics
from gateway_sparkplug.settings import SparkplugSettings
from gateway_sparkplug.speaker import ScopeSpeaker
from gateway_sparkplug.topics import valid_id

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)


def gateway_version() -> str:
    try:
        return version("station-gateway")
    except PackageNotFoundError:  # running from a checkout that is not installed
        return "unknown"


class SparkplugService:
    """``gateway.transport.Service``; runs where the MES publisher may (role ``publisher``)."""

    name = "sparkplug"
    roles = frozenset({"publisher"})

    def __init__(self, settings: SparkplugSettings, broker: BrokerAddress) -> None:
        self.settings = settings
        self.broker = broker
        self.speakers: dict[str, ScopeSpeaker] = {}
        self._refused: set[str] = set()

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        metrics = SparkplugMetrics(gateway.metrics)
        ver = gateway_version()
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._discover, gateway, tasks, metrics, ver)
            await gateway.stopping.wait()
            # Speakers end their terms themselves (NDEATH, lease released) on stopping.
            with anyio.move_on_after(5):
                for speaker in self.speakers.values():
                    await speaker.stopped.wait()
            tasks.cancel_scope.cancel()

    @staticmethod
    async def _known(gateway: Gateway) -> set[str]:
        assert gateway.store is not None  # the plugin registers the service only with a store
        return await gateway.store.known_scopes()

    async def _discover(
        self, gateway: Gateway, tasks: TaskGroup, metrics: SparkplugMetrics, ver: str
    ) -> None:
        while not gateway.stopping.is_set():
            try:
                scopes = set(self.settings.scopes) or await self._known(gateway)
            except Exception as error:
                log.warning("sparkplug: scopes not read: %s", error)
                scopes = set()
            for scope in sorted(scopes - set(self.speakers)):
                if not valid_id(scope):
                    if scope not in self._refused:
                        self._refused.add(scope)
                        log.warning("sparkplug: scope %r is no valid edge node id: left out", scope)
                    continue
                speaker = ScopeSpeaker(gateway, scope, self.settings, self.broker, ver, metrics)
                self.speakers[scope] = speaker
                tasks.start_soon(speaker.run)
            with anyio.move_on_after(self.settings.poll_seconds):
                await gateway.stopping.wait()
