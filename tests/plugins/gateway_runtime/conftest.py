"""The runtime's integration tests (the chaos test with them) run on every Redis deployment."""

from __future__ import annotations

import pytest


@pytest.fixture
def redis_url(redis_deployment_url: str) -> str:
    """One node, a Sentinel-watched master and a 3-master Cluster, in turn."""
    return redis_deployment_url
