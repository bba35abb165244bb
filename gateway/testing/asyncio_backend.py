"""The ``anyio_backend`` fixture of the gateway's pytest plugin, in a module of its own.

aiomqtt, redis.asyncio and the HTTP server run on asyncio only. anyio's pytest plugin offers
every installed backend (trio too, when something installed it) and, loading after the
gateway's plugin, its fixture would win; ``pytest_plugin`` registers this module at
``pytest_configure``, after every plugin, so this fixture is the one used.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
