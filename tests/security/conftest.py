"""Fixtures shared by the security tests (servers are per module, in the test files).

Certificates come from the session's ``tls_certificates`` fixture (the gateway's pytest plugin,
made with the ``openssl`` command); servers from ``gateway.testing.services``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from tests.plugins.gateway_ui.conftest import browser as browser
from tests.security.station import Deployment, HostileStation, make_deployment


@pytest.fixture
def secret_file(tmp_path: Path) -> Callable[[str], str]:
    """Write a secret the way Docker/Kubernetes mount one (trailing newline); return its path."""

    def write(value: str) -> str:
        path = tmp_path / f"secret-{uuid.uuid4().hex[:8]}"
        path.write_text(value + "\n")
        path.chmod(0o600)
        return str(path)

    return write


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log line at every level (paho's packet traces included)."""
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Deployment]:
    """The shipped mosquitto configuration and ACL, and the session's Redis (module-wide)."""
    made = make_deployment(tmp_path_factory.mktemp("deployment"), redis_url)
    try:
        yield made
    finally:
        made.broker.close()


@pytest.fixture
async def hostile_station(deployment: Deployment, tmp_path: Path) -> AsyncIterator[HostileStation]:
    """A gateway process (ulimit -n 1024) on the deployment, its scope configured."""
    station = HostileStation(deployment, tmp_path)
    try:
        yield station
    finally:
        station.stop()
        print(station.log_tail(200))  # shown when the test failed
