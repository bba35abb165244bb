"""Fixtures for the MES publisher: a station (job management, scripted recipes) and its publisher.

The job management plugin's change records carry the order and response documents, and the
publisher under test publishes them as they are. ``RepositoryDocuments`` (on the job management
plugin's public ``JobRepository``) is the fallback source for records without them, which
``PublisherPlugin(documents=...)`` accepts; ``test_index`` covers that path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.app import Gateway, load_gateway_settings
from gateway.plugins import build_plugin_manager
from gateway.store import Store
from gateway.testing.mes import MesClient
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.model import to_json
from gateway_jobs.repository import JobRepository
from gateway_jobs.testing import JobsMes, Station, return_status, work_master
from gateway_publisher.plugin import PublisherPlugin
from gateway_publisher.service import PublisherService

SCOPE = "cell1"
COMPLETING = {"run": True, "complete": {"torque": 41.5, "serial": "SN-7"}}


class RepositoryDocuments:
    """Order and response documents read through the job management plugin (tests only)."""

    def __init__(self, store: Store) -> None:
        self.repository = JobRepository(store)

    async def job_order(self, scope: str, job_order_id: str) -> Any:
        job = await self.repository.load(scope, job_order_id)
        return None if job is None else to_json(job.job_order)

    async def job_response(self, scope: str, job_order_id: str) -> Any:
        job = await self.repository.load(scope, job_order_id)
        return None if job is None else to_json(job.response)


@dataclass
class Rig:
    """A station whose gateways run job management and, when asked, the publisher under test."""

    station: Station
    publishers: list[PublisherPlugin] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return self.station.topic_prefix

    def environ(self, instance: str, role: str, **settings: str) -> dict[str, str]:
        # A publisher-only gateway leaves job management out: a loaded processor subscribes to
        # the MES commands whatever the role, and commands would queue in its session.
        blocked = "sfc,publisher" if role != "publisher" else "sfc,publisher,jobs"
        return {
            "GATEWAY_PLUGINS_BLOCK": blocked,
            "GATEWAY_MQTT_URL": self.station.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.station.name,
            "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "1",
            "GATEWAY_REDIS_URL": self.station.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.station.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.station.name}-{instance}",
            "GATEWAY_GATEWAY_ROLE": role,
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_JOBS_TOPIC_PREFIX": self.prefix,
            "GATEWAY_PUBLISHER_TOPIC_PREFIX": self.prefix,
            **settings,
        }

    def gateway(
        self,
        instance: str = "a",
        *,
        role: str = "all",
        publisher: bool = True,
        documents: bool = False,
        **settings: str,
    ) -> Gateway:
        """A gateway instance; ``publisher`` adds the publisher under test (role permitting)."""
        extra: dict[str, Any] = {"recipes": self.station.plugin}
        if publisher:
            plugin = PublisherPlugin(documents=RepositoryDocuments if documents else None)
            self.publishers.append(plugin)
            extra["publisher-test"] = plugin
        environ = self.environ(instance, role, **settings)
        return Gateway.from_environment(None, environ, extra_plugins=extra)

    @property
    def service(self) -> PublisherService:
        """The publisher service of the newest gateway built with one."""
        return self.publishers[-1].services[-1]

    @asynccontextmanager
    async def jobs_mes(
        self, scope: str = SCOPE, *, configure: bool = True
    ) -> AsyncIterator[JobsMes]:
        """The MES's command side (methods, configuration); ``configure`` (a gateway must be
        running) gives the scope a Work Master whose recipe completes at once."""
        async with self.station.mes(scope) as mes:
            if configure:
                await self.configure(mes)
            yield mes

    @staticmethod
    async def configure(mes: JobsMes) -> None:
        """Give the scope a Work Master whose recipe completes at once (the gateway must run)."""
        assert return_status(await mes.configure("workmaster", work_master("wm", COMPLETING))) == 1

    @asynccontextmanager
    async def mes(self, scope: str = SCOPE, **seen: Any) -> AsyncIterator[MesClient]:
        """The MES's reading side: ``MesClient`` on its own connection."""
        async with connect_test_client(self.station.mqtt_url) as client:
            yield MesClient(client, self.prefix, scope, **seen)


@pytest.fixture
def rig(mqtt_url: str, redis_url: str, unique: str) -> Rig:
    return Rig(Station(mqtt_url, redis_url, unique))


def make_store(redis_url: str, key_prefix: str) -> Store:
    environ = {
        "GATEWAY_PLUGINS_ALLOW": "redis",
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": key_prefix,
    }
    plugins = build_plugin_manager(environ)
    store: Store | None = plugins.hook.gateway_make_store(
        settings=load_gateway_settings(plugins, None, environ)
    )
    assert store is not None
    return store


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[Store]:
    async with make_store(redis_url, unique) as entered:
        yield entered
