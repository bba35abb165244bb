"""The floor of the gateway's stack: the least any step path built on it can cost.

One asyncio process on the libraries the gateway runs on (aiomqtt over paho, redis-py asyncio
with hiredis, anyio on uvloop, the gateway's own MQTT property decoding) does, per step, only
what the issue's step path must: receive the equipment's reply, commit it in one Redis script
(a compare-and-swap of the job's state), publish the next command (MQTT v5 QoS 1, Response
Topic, Correlation Data and the CloudEvent attributes as user properties) and acknowledge the
reply after the commit. No job management, no chart, no hooks, no timers.

``benchmarks/step_path.py`` runs it beside the raw MQTT baseline at every level: the ratio of
this floor to raw MQTT is the most a gateway process on this stack could reach on the machine.
On its own (a broker and a redis-server must be running, and an equipment that answers on the
Response Topic, e.g. the responder of ``step_path.py``)::

    python benchmarks/stack_floor.py --mqtt-port 1883 --redis-port 6379 --in-flight 10 \
        --seconds 8 --topic bench-raw/commands

It prints one JSON object: ``{"steps_per_s": ..., "cpu_ms_per_step": ..., "step_p50_ms": ...,
"step_p99_ms": ...}`` (the step period: from one command of a job to its next).
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import time
import uuid
from typing import Any

import aiomqtt
import anyio
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from redis.asyncio import Redis

from gateway_mqtt import decoding

# Read the state, check the attempt, write the next state: the shape of the gateway's commit.
COMMIT = """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


def _command_properties(reply_topic: str, job: int, step: int) -> Properties:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.ResponseTopic = reply_topic
    properties.CorrelationData = f"floor-{job}:{step}".encode()
    properties.ContentType = "application/json"
    properties.UserProperty = [
        ("specversion", "1.0"),
        ("id", uuid.uuid4().hex),
        ("source", "urn:bench:floor"),
        ("type", "bench.command"),
        ("subject", f"floor-{job}"),
    ]
    return properties


async def _floor(args: argparse.Namespace) -> dict[str, float]:
    decoding.install()
    redis = Redis(port=args.redis_port)
    commit = redis.register_script(COMMIT)
    reply_topic = f"bench-floor/replies/{uuid.uuid4().hex[:8]}"
    steps = [0] * args.in_flight
    sent_at = [0.0] * args.in_flight
    periods: list[float] = []
    counted = {"steps": 0, "measuring": False}
    async with aiomqtt.Client(
        "127.0.0.1",
        args.mqtt_port,
        protocol=aiomqtt.ProtocolVersion.V5,
        max_inflight_messages=1000,
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    ) as client:
        client._client.manual_ack_set(True)
        await client.subscribe(reply_topic, qos=1)

        async def send(job: int) -> None:
            now = time.perf_counter()
            if counted["measuring"] and sent_at[job]:
                periods.append(now - sent_at[job])
            sent_at[job] = now
            await client.publish(
                args.topic,
                b'{"command":"push"}',
                qos=1,
                properties=_command_properties(reply_topic, job, steps[job]),
            )

        async def on_reply(message: aiomqtt.Message) -> None:
            correlation = bytes(getattr(message.properties, "CorrelationData", b""))
            job = int(correlation.decode().split(":")[0].removeprefix("floor-"))
            step = steps[job]
            if not await commit(keys=[f"floor:{job}"], args=[str(step), str(step + 1)]):
                raise RuntimeError(f"job {job}: step {step} was committed twice")
            client._client.ack(message.mid, message.qos)
            steps[job] = step + 1
            if counted["measuring"]:
                counted["steps"] += 1
            await send(job)

        async def receive() -> None:
            async for message in client.messages:
                task_group.start_soon(on_reply, message)

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(receive)
            for job in range(args.in_flight):
                await redis.delete(f"floor:{job}")
                await send(job)
            await anyio.sleep(min(1.0, args.seconds / 4))  # warm up
            cpu_before, started = _cpu_seconds(), time.perf_counter()
            counted["measuring"] = True
            await anyio.sleep(args.seconds)
            counted["measuring"] = False
            elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_before
            task_group.cancel_scope.cancel()
    await redis.aclose()
    done = max(1, counted["steps"])
    periods.sort()
    return {
        "steps_per_s": counted["steps"] / elapsed,
        "cpu_ms_per_step": 1000 * cpu / done,
        "step_p50_ms": 1000 * periods[len(periods) // 2] if periods else float("nan"),
        "step_p99_ms": 1000 * periods[int(0.99 * len(periods))] if periods else float("nan"),
    }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mqtt-port", type=int, required=True)
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--in-flight", type=int, default=10, help="concurrent jobs")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured window")
    parser.add_argument("--topic", required=True, help="where the equipment takes commands")
    args = parser.parse_args()
    figures: Any = anyio.run(_floor, args, backend_options={"use_uvloop": True})
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
