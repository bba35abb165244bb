"""Fixtures shared by the security tests (servers are per module, in the test files).

Certificates come from the session's ``tls_certificates`` fixture (the gateway's pytest plugin,
made with the ``openssl`` command); servers from ``gateway.testing.services``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest


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
