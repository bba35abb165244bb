"""What every part of the runtime shares: settings, the gateway, the formats, Redis and keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.errors import GatewayError
from gateway.formats import Executor, ExecutorOptions, Program, RecipeFormat
from gateway_runtime.compensation import compensating
from gateway_runtime.fanout import fanning
from gateway_runtime.keys import RuntimeKeys
from gateway_runtime.metrics import EngineMetrics
from gateway_runtime.settings import RuntimeSettings

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.phases import InterpreterPhase
    from gateway.store import Store


class EngineContext:
    """The runtime's settings, gateway, formats, metrics and store, looked up when used.

    The store's client exists only once the gateway runs, so it is looked up on every use.
    """

    def __init__(
        self,
        settings: RuntimeSettings,
        gateway: InterpreterPhase,
        formats: Mapping[str, RecipeFormat],
    ) -> None:
        self.settings = settings
        self.gateway = gateway
        self.formats = formats  # by dataschema
        self.consumer = gateway.instance_id
        self.metrics = EngineMetrics(gateway.metrics)
        self.keys = RuntimeKeys(self.store.keys)
        self.options = ExecutorOptions(settings.recheck_seconds, settings.offline_timeout_seconds)

    @property
    def store(self) -> Store:
        store = self.gateway.store
        if store is None:
            raise GatewayError("the recipe runtime needs a store (is the redis plugin blocked?)")
        return store

    @property
    def client(self) -> Redis:
        return self.store.client

    def format(self, dataschema: str) -> RecipeFormat:
        """The format of ``dataschema`` (``GatewayError``: none is installed)."""
        found = self.formats.get(dataschema)
        if found is None:
            raise GatewayError(f"no recipe format for DataSchema {dataschema!r} is installed")
        return found

    def executor(self, program: Program, parameters: Mapping[str, Any]) -> Executor:
        """The program's executor, with the rollback of its compensations if it has any."""
        inner = fanning(program.executor(parameters, self.options), program)
        return compensating(inner, program)
