"""``gateway run`` runs on the event loop ``gateway.event_loop`` names, and says which."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.testing import poll_until
from gateway.testing.cli import command_environ
from gateway.testing.processes import GatewayProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.mark.parametrize(("choice", "loop"), [(None, "uvloop"), ("asyncio", "asyncio")])
async def test_gateway_run_uses_the_event_loop_it_is_set_to(
    choice: str | None, loop: str, redis_url: str, unique: str, tmp_path: Path
) -> None:
    environ = command_environ(
        GATEWAY_REDIS_URL=redis_url,
        GATEWAY_REDIS_KEY_PREFIX=unique,
        GATEWAY_MQTT_URL=f"memory://{unique}",
        GATEWAY_HTTP_PORT="0",
        GATEWAY_GATEWAY_DATA_DIR=str(tmp_path),
    )
    if choice is not None:
        environ["GATEWAY_GATEWAY_EVENT_LOOP"] = choice
    gateway = GatewayProcess(
        None, environ, tmp_path / "log", " started (role all)", arguments=("run",)
    )
    gateway.start()
    try:

        async def started() -> bool:
            assert gateway.returncode is None, gateway.log.read_text()
            return gateway.ready()

        await poll_until(started, timeout=60)
    finally:
        gateway.stop()
    line = next(line for line in gateway.log.read_text().splitlines() if " started (role" in line)
    assert line.endswith(f"event loop {loop}"), line
