"""What every part of the SFC engine shares: settings, the gateway, Redis and key names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.errors import GatewayError
from gateway_sfc.chart import Chart
from gateway_sfc.engine import Executor
from gateway_sfc.keys import SfcKeys
from gateway_sfc.metrics import EngineMetrics
from gateway_sfc.settings import SfcSettings

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.phases import InterpreterPhase
    from gateway.store import Store


class EngineContext:
    """The engine's settings, gateway, metrics and store, looked up when used.

    The store's client exists only once the gateway runs, so it is looked up on every use.
    """

    def __init__(self, settings: SfcSettings, gateway: InterpreterPhase) -> None:
        self.settings = settings
        self.gateway = gateway
        self.consumer = gateway.instance_id
        self.metrics = EngineMetrics(gateway.metrics)
        self.keys = SfcKeys(self.store.keys)

    @property
    def store(self) -> Store:
        store = self.gateway.store
        if store is None:
            raise GatewayError("the SFC engine needs a store (is the redis plugin blocked?)")
        return store

    @property
    def client(self) -> Redis:
        return self.store.client

    def executor(self, chart: Chart, parameters: Mapping[str, Any]) -> Executor:
        settings = self.settings
        return Executor(
            chart, parameters, settings.recheck_seconds, settings.offline_timeout_seconds
        )
