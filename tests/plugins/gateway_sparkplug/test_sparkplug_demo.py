"""``gateway demo`` with the Sparkplug mirror on, over a real broker: ``gateway sparkplug watch``
shows the tag tree a SCADA host sees."""

from __future__ import annotations

import io
import os
import sys

import anyio
import pytest

from gateway_sparkplug.watch import TagTree, watch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_the_demo_with_sparkplug_shows_the_tag_tree(mqtt_url: str, unique: str) -> None:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GATEWAY_")}
    environ |= {"GATEWAY_SPARKPLUG_ENABLED": "true", "GATEWAY_SPARKPLUG_GROUP_ID": unique}
    environ["GATEWAY_SPARKPLUG_SCOPES"] = "cell"  # at once, not at the scope's discovery
    environ["GATEWAY_SPARKPLUG_POLL_SECONDS"] = "0.2"
    # The demo's names are fixed (client id gw-demo, share group, equipment topics): on the
    # broker the whole test session shares, keep this run apart and leave no session behind.
    environ |= {
        "GATEWAY_MQTT_CLIENT_ID": f"gw-{unique}",
        "GATEWAY_MQTT_SHARE_GROUP": unique,
        "GATEWAY_MQTT_SESSION_EXPIRY_SECONDS": "0",
        "GATEWAY_SIMULATOR_TOPIC_PREFIX": f"{unique}-sim",
    }
    command = [sys.executable, "-m", "gateway.cli", "demo", "--seed", "7", "--jobs", "2"]
    command += ["--interval", "0.1", "--mqtt", mqtt_url]
    out = io.StringIO()
    subscribed = anyio.Event()
    tree = TagTree()
    async with anyio.create_task_group() as tasks:

        async def follow() -> None:
            await watch(mqtt_url, unique, out, tree=tree, until_death=True, ready=subscribed.set)

        tasks.start_soon(follow)
        await subscribed.wait()
        with anyio.fail_after(120):
            demo = await anyio.run_process(command, env=environ, check=False)
    assert demo.returncode == 0, demo.stdout.decode() + demo.stderr.decode()
    lines = tree.lines()
    node = f"{unique}/cell"
    assert f"{node}/Scope/Online = true  (stale)" in lines  # the demo ended: NDEATH
    assert f"{node}/Jobs/Running/1/JobOrderID = AXLE-0002  (stale)" in lines
    # The demo's MES clears each job it read (EndState), and stops the gateway right after the
    # last Clear: whether the node published that Clear before its NDEATH is a matter of timing.
    assert {
        f"{node}/Jobs/Running/1/State = Ended.Completed  (stale)",
        f"{node}/Jobs/Running/1/State = EndState  (stale)",
    } & set(lines)
    printed = out.getvalue()
    assert f"DDATA seq {_seq(printed, 'Running/1/State=Ended.Completed')} {node}/Jobs" in printed
    for device in ("positioner", "tightener"):
        assert f"{node}/{device}/LastResultStatus = Good  (stale)" in lines
    assert f"{node}/camera/LastEventType = com.example.station.qa_result.v1  (stale)" in lines
    assert f"NDEATH {node}: bdSeq=" in printed


def _seq(printed: str, text: str) -> str:
    """The seq of the first printed message holding ``text``."""
    line = next(line for line in printed.splitlines() if text in line)
    return line.split()[2]
