"""The ``line`` fixture: the two gateways of a line test (``harness.Line``)."""

from __future__ import annotations

import pytest

from tests.plugins.gateway_line.harness import Line


@pytest.fixture
def line(mqtt_url: str, redis_url: str, unique: str) -> Line:
    return Line(mqtt_url, redis_url, unique)
