"""pytest fixtures: real servers on free ports and unique names per test."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest

from gateway.testing import asyncio_backend
from gateway.testing.redis_ha import (
    ClusterDeployment,
    SentinelDeployment,
    cluster_deployment,
    sentinel_deployment,
)
from gateway.testing.services import (
    ServerProcess,
    TestCertificates,
    make_certificates,
    mosquitto,
    redis_server,
)


def pytest_configure(config: pytest.Config) -> None:
    """Make ``anyio_backend`` asyncio, whatever anyio's plugin would offer (see the module)."""
    config.pluginmanager.register(asyncio_backend, "gateway-asyncio-backend")


@pytest.fixture(scope="session")
def redis_process() -> Iterator[ServerProcess | None]:
    """The private redis-server, or ``None`` when ``GATEWAY_TEST_REDIS_URL`` points elsewhere."""
    if os.environ.get("GATEWAY_TEST_REDIS_URL"):
        yield None
        return
    server = redis_server().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_single_url(redis_process: ServerProcess | None) -> str:
    if redis_process is None:
        return os.environ["GATEWAY_TEST_REDIS_URL"]
    return f"redis://127.0.0.1:{redis_process.port}/0"


@pytest.fixture(scope="session")
def redis_url(redis_single_url: str) -> str:
    """``redis.url`` of the private redis-server (one node)."""
    return redis_single_url


# The Redis deployments ``redis_deployment_url`` runs a test against, in turn.
REDIS_DEPLOYMENTS = ("single", "sentinel", "cluster")


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelDeployment]:
    """A private master + replica + 3 Sentinels (quorum 2), shared by the session.

    Tests that kill its master make their own (``gateway.testing.redis_ha``).
    """
    deployment = sentinel_deployment()
    try:
        yield deployment.start()
    finally:
        deployment.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterDeployment]:
    """A private 3-master Redis Cluster (no replicas: two cores), shared by the session."""
    deployment = cluster_deployment(masters=3, replicas=0)
    try:
        yield deployment.start()
    finally:
        deployment.close()


@pytest.fixture(params=REDIS_DEPLOYMENTS)
def redis_deployment_url(request: pytest.FixtureRequest) -> str:
    """``redis.url`` of one node, of the Sentinel deployment and of the Cluster, in turn.

    A test directory runs against all three by overriding ``redis_url`` with it.
    """
    if request.param == "single":
        return str(request.getfixturevalue("redis_single_url"))
    deployment = request.getfixturevalue(f"redis_{request.param}")
    return str(deployment.url)


@pytest.fixture(scope="session")
def mqtt_process() -> Iterator[ServerProcess | None]:
    """The private mosquitto, or ``None`` when ``GATEWAY_TEST_MQTT_URL`` points elsewhere."""
    if os.environ.get("GATEWAY_TEST_MQTT_URL"):
        yield None
        return
    server = mosquitto().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def mqtt_url(mqtt_process: ServerProcess | None) -> str:
    if mqtt_process is None:
        return os.environ["GATEWAY_TEST_MQTT_URL"]
    return f"mqtt://127.0.0.1:{mqtt_process.port}"


@pytest.fixture
def unique() -> str:
    """A name no other test uses: prefix topics, keys and client ids with it."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def tls_certificates(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """A test CA with a server certificate for 127.0.0.1/localhost, a client certificate and an
    unrelated CA, made once per session with the ``openssl`` command (skips without it).

    Start servers with them through ``gateway.testing.services``: ``mosquitto_secure`` (TLS
    listener, password file, client certificates) and ``redis_server(tls=..., users=...)``.
    """
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    return make_certificates(tmp_path_factory.mktemp("tls"))
