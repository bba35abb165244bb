"""Test support for the gateway and for plugin authors.

The pytest plugin (``gateway.testing.pytest_plugin``, loaded automatically through the ``pytest11``
entry point) provides ``redis_url`` and ``mqtt_url`` fixtures backed by private server processes
(or by ``GATEWAY_TEST_REDIS_URL`` / ``GATEWAY_TEST_MQTT_URL``), and ``unique`` names so tests can
run in any order against shared servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

from gateway.app import Gateway
from gateway.plugins import ALWAYS_LOADED, DEFAULT_PLUGINS

# ``GATEWAY_PLUGINS_BLOCK`` value that leaves out every default plugin but the host's own
# settings, so a test runs a plugin (or a stand-in) on its own.
WITHOUT_DEFAULT_PLUGINS = ",".join(name for name, _ in DEFAULT_PLUGINS if name not in ALWAYS_LOADED)


@asynccontextmanager
async def running(gateway: Gateway) -> AsyncIterator[Gateway]:
    """Run ``gateway`` in the background for the duration of the block, then stop it cleanly."""
    async with anyio.create_task_group() as tasks:
        await tasks.start(gateway.run)
        try:
            yield gateway
        finally:
            gateway.request_stop("test finished")


async def wait_until(condition: Callable[[], object], *, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it is true; ``TimeoutError`` after ``timeout`` seconds.

    For tests that watch state another task or process changes (no event to wait on).
    """
    with anyio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def poll_until(
    condition: Callable[[], Awaitable[object]], *, timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Ask ``condition`` (an async check: a store read, an MES request) until it is true;
    ``TimeoutError`` after ``timeout`` seconds. For state with no event to wait on."""
    with anyio.fail_after(timeout):
        while not await condition():  # noqa: ASYNC110
            await anyio.sleep(interval)


class HeldPauses:
    """An injected ``sleep`` for tests (``ReadPace``, the dispatcher, the trace writer): each
    pause lasts until the test ends it with ``end``, so a test decides when time has passed."""

    def __init__(self) -> None:
        self.held: list[anyio.Event] = []

    async def __call__(self, seconds: float) -> None:
        ended = anyio.Event()
        self.held.append(ended)
        await ended.wait()

    def end(self) -> None:
        """End the latest pause."""
        self.held[-1].set()
