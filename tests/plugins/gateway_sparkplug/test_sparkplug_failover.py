"""Two gateway processes mirror one scope; the one speaking for it is SIGKILLed.

The broker publishes its Will, the NDEATH with the bdSeq of its NBIRTH; the surviving instance
takes the scope's lease over and is born with a new bdSeq.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gateway.testing.processes import GatewayProcess
from gateway_simulator.testing import station_environ
from tests.plugins.gateway_sparkplug.conftest import sparkplug_host

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SCOPE = "cell1"


@pytest.fixture
def instances(
    mqtt_url: str, redis_url: str, unique: str, tmp_path: Path
) -> Iterator[dict[str, GatewayProcess]]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    processes = {}
    for instance in ("a", "b"):
        environ = station_environ(
            mqtt_url=mqtt_url,
            redis_url=redis_url,
            name=unique,
            instance=instance,
            simulator={"enabled": "false"},
            extra={
                "GATEWAY_SPARKPLUG_ENABLED": "true",
                "GATEWAY_SPARKPLUG_GROUP_ID": unique,
                "GATEWAY_SPARKPLUG_SCOPES": SCOPE,
                "GATEWAY_SPARKPLUG_LEASE_SECONDS": "1",
                "GATEWAY_SPARKPLUG_POLL_SECONDS": "0.2",
                "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path / instance),
            },
        )
        processes[instance] = GatewayProcess(
            None,
            {**inherited, **environ},
            tmp_path / f"{instance}.log",
            ready_line=" started (role all)",
            arguments=("run",),
        )
    try:
        yield processes
    finally:
        for process in processes.values():
            process.stop()


async def test_killing_the_speaking_instance_gives_its_ndeath_and_a_new_birth(
    instances: dict[str, GatewayProcess], mqtt_url: str, unique: str, spb: ModuleType
) -> None:
    async with sparkplug_host(mqtt_url, spb, unique) as host:
        for process in instances.values():
            process.start()
        await host.wait(lambda: bool(host.of("NBIRTH", SCOPE)), timeout=60)
        first = host.of("NBIRTH", SCOPE)[0].metrics
        speaker = first["Properties/Instance"].removeprefix(f"{unique}-")
        survivor = "b" if speaker == "a" else "a"
        assert speaker in instances
        await host.wait(lambda: bool(host.of("DBIRTH", SCOPE, "Jobs")))

        instances[speaker].kill()
        await host.wait(lambda: len(host.of("NBIRTH", SCOPE)) == 2, timeout=30)
        [death] = host.of("NDEATH", SCOPE)  # the Will: the process said nothing itself
        assert death.metrics["bdSeq"] == first["bdSeq"]
        second = host.of("NBIRTH", SCOPE)[1].metrics
        assert second["Properties/Instance"] == f"{unique}-{survivor}"
        assert second["bdSeq"] != first["bdSeq"]
        kinds = [(m.kind, m.node) for m in host.messages]
        rebirth = kinds.index(("NBIRTH", SCOPE), kinds.index(("NBIRTH", SCOPE)) + 1)
        assert kinds.index(("NDEATH", SCOPE)) < rebirth  # the death, then the new birth
        await host.wait(lambda: len(host.of("DBIRTH", SCOPE, "Jobs")) == 2)
    assert host.seq_errors == []
