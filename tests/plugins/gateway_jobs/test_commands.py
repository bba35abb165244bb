"""``gateway jobs ...`` and ``gateway config push`` as a person types them: separate processes
talking to a running gateway over the real mosquitto, its state in the real Redis."""

from __future__ import annotations

import json
import socket
import subprocess
from functools import partial
from pathlib import Path

import anyio
import pytest
import yaml

from gateway.testing import running
from gateway.testing.cli import command_environ, gateway_command, run_gateway
from gateway_jobs.testing import Station, job_order, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def gateway_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(partial(run_gateway, *args))


def start_gateway(*args: str) -> subprocess.Popen[str]:
    """``gateway *args`` in the background, output piped."""
    return subprocess.Popen(
        [*gateway_command(), *args],
        env=command_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def where(station: Station) -> list[str]:
    return ["-s", "cell1", "--mqtt", station.mqtt_url, "--prefix", station.topic_prefix]


async def test_a_job_from_file_to_clear_by_hand(station: Station, tmp_path: Path) -> None:
    wm_file = tmp_path / "wm.yaml"
    wm_file.write_text("# the test recipe: run when started\n" + yaml.safe_dump(work_master()))
    order_file = tmp_path / "j1.json"
    order_file.write_text(json.dumps(job_order("j1", priority=3)))
    at = where(station)
    watcher = start_gateway("jobs", "watch", *at, "--json", "--count", "5")
    try:
        async with running(station.gateway()):
            assert watcher.stderr is not None
            first = await anyio.to_thread.run_sync(watcher.stderr.readline)
            assert first.startswith(f"watching {station.topic_prefix}/cell1/events")

            pushed = await gateway_cli("config", "push", "workmaster", str(wm_file), *at)
            assert (pushed.returncode, pushed.stdout) == (0, "PUT workmaster wm: done\n")
            stored = await gateway_cli("jobs", "store", str(order_file), "--start", *at)
            assert (stored.returncode, stored.stdout) == (0, "StoreAndStart j1: done\n")

            # No -s: the one scope the station publishes (its state index, retained once the
            # publisher has the job).
            with anyio.fail_after(30):
                while True:
                    listed = await gateway_cli("jobs", "list", *at[2:])
                    if listed.returncode == 0:
                        break
                    assert "name the scope with -s SCOPE" in listed.stderr, listed.stderr
            row = next(line for line in listed.stdout.splitlines() if " j1 " in line)
            assert row.split()[1:3] == ["Running", "3"]  # the state and the priority
            assert max(map(len, listed.stdout.splitlines())) <= 80

            paused = await gateway_cli("jobs", "pause", "j1", "--comment", "tool change", *at)
            assert (paused.returncode, paused.stdout) == (0, "Pause j1: done\n")
            shown = await gateway_cli("jobs", "show", "j1", "--json", *at)
            assert json.loads(shown.stdout)["JobState"][1]["StateText"]["Text"] == "Suspended"

            refused = await gateway_cli("jobs", "pause", "j1", *at)
            assert refused.returncode == 1
            assert refused.stderr.startswith(
                "gateway jobs: not allowed in the job's current state (ReturnStatus 8)"
            )
            for method in ("stop", "clear"):
                done = await gateway_cli("jobs", method, "j1", *at)
                assert done.returncode == 0, done.stderr
            empty = await gateway_cli("jobs", "list", "--json", *at)
            assert (empty.returncode, json.loads(empty.stdout)) == (0, [])
            unknown = await gateway_cli("jobs", "show", "nope", *at)
            assert unknown.returncode == 1
            assert "unknown job order (ReturnStatus 2)" in unknown.stderr

            out, err = await anyio.to_thread.run_sync(partial(watcher.communicate, timeout=60))
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [event["state"] for event in events] == [
        "AllowedToStart.Ready",
        "Running",
        "Interrupted.Suspended",
        "Ended.Closed",
        "EndState",
    ]
    assert {event["JobOrderID"] for event in events} == {"j1"}


async def test_without_a_published_scope_the_scope_must_be_named(
    mqtt_url: str, unique: str
) -> None:
    done = await gateway_cli("jobs", "list", "--mqtt", mqtt_url, "--prefix", unique)
    assert (done.returncode, done.stderr) == (
        1,
        "gateway jobs: name the scope with -s SCOPE (none is published yet)\n",
    )


async def test_no_gateway_on_the_topics_says_so(mqtt_url: str, unique: str) -> None:
    done = await gateway_cli(
        "jobs", "list", "-s", "cell1", "--mqtt", mqtt_url, "--prefix", unique, "--timeout", "1"
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1  # one line, as every failure
    first, rest = done.stderr.split("; likely causes: ")
    assert first == f"gateway jobs: no reply on {unique}/cell1/commands within 1 s"
    causes = rest.split("; (")
    assert len(causes) == 3
    assert f"no gateway runs with jobs.topic_prefix = '{unique}'" in causes[0]
    assert "(replies were asked on mes/replies/cli/" in causes[1]  # the default reply prefix
    assert "--reply-prefix" in causes[1]
    assert "kept the MQTT session" in causes[2]


async def test_the_reply_prefix_is_a_flag(mqtt_url: str, unique: str) -> None:
    at = ["-s", "cell1", "--mqtt", mqtt_url, "--prefix", unique, "--timeout", "1"]
    done = await gateway_cli("jobs", "list", *at, "--reply-prefix", f"{unique}/answers")
    assert f"(replies were asked on {unique}/answers/" in done.stderr
    wrong = await gateway_cli("jobs", "list", *at, "--reply-prefix", "mes/+")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("gateway jobs: --reply-prefix: expected topic levels")


async def test_an_unreachable_broker_says_so() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = await gateway_cli(
        "jobs", "list", "-s", "cell1", "--mqtt", f"mqtt://127.0.0.1:{port}", "--timeout", "2"
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"gateway jobs: cannot reach the MQTT broker at 127.0.0.1:{port}")
    assert done.stderr.endswith(" (the broker URL from --mqtt)\n")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


async def test_an_operator_takes_a_scope_offline_and_online(station: Station) -> None:
    at = where(station)
    async with running(station.gateway(queue_feed_jobs="1")), station.mes() as mes:
        await mes.configure("workmaster", work_master("wm"))
        offline = await gateway_cli("scope", "offline", "--reason", "tool change", *at)
        assert (offline.returncode, offline.stdout) == (
            0,
            "scope cell1 is offline: queued jobs wait\n",
        )
        await mes.store(job_order("j1", priority=4), "StoreAndStart")
        await mes.store(job_order("j2", priority=2), "StoreAndStart")
        await mes.queue(until=lambda document: document["WaitingCount"] == 2)
        queue = await gateway_cli("scope", "queue", "--json", *at)
        assert queue.returncode == 0, queue.stderr
        document = json.loads(queue.stdout)
        assert (document["Online"], document["Reason"]) == (False, "tool change")
        assert [entry["JobOrderID"] for entry in document["Waiting"]] == ["j1"]  # the first
        table = await gateway_cli("scope", "queue", *at)
        assert "OFFLINE (tool change)" in table.stdout
        assert "(1 more waiting, not listed)" in table.stdout
        online = await gateway_cli("scope", "online", *at)
        assert (online.returncode, online.stdout) == (0, "scope cell1 is online\n")
        with anyio.fail_after(10):
            while True:
                response = (await mes.job_response("j1")).data["JobResponse"]
                if response["JobState"][0]["StateText"]["Text"] == "Running":
                    break
                await anyio.sleep(0.05)
