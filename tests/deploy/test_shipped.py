"""The deployment as shipped, run as processes: the compose services without a container engine.

What is the shipped one and what the test changes:

- secrets: ``deploy/make-secrets.sh`` itself, run in a copy of ``deploy/`` (random passwords);
- mosquitto: ``deploy/mosquitto/mosquitto.conf`` with the shipped ACL and the password file
  ``deploy/mosquitto/passwd.sh`` makes (container paths moved into a temporary directory, the
  listener on a free loopback port);
- Redis: the redis service's own command from ``deploy/compose.yaml`` (the ACL user ``gateway``
  on ``gw:*`` keys, the default user off), run by ``sh`` with the paths moved and
  ``redis-server`` on a free port instead of the image's entrypoint;
- gateway-a, gateway-b, publisher and simulator: ``gateway`` processes with each service's
  command (``run -c deploy/gateway.toml --role ...``) and environment from the compose file,
  only the secrets' paths moved, ``GATEWAY_HTTP_PORT`` on free ports and the broker's and Redis's
  host names (``mosquitto``, ``redis``) replaced by loopback addresses through
  ``GATEWAY_MQTT_URL`` / ``GATEWAY_REDIS_URL``.

Then, as an integrator commissions the station, logged in as the MES's broker user ``mes``:
``gateway config push`` a Work Master, ``gateway jobs store --start`` a job, ``gateway jobs
watch`` it end, ``gateway jobs list`` it; and an MES written from the design document sees it in
the state index, its order and result topics and the queue topic; the UI's JSON shows it.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import aiomqtt
import anyio
import pytest
import yaml

from gateway.testing import poll_until
from gateway.testing.cli import command_environ, gateway_command, run_gateway
from gateway.testing.mes import MesClient
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import (
    ServerProcess,
    find_executable,
    free_port,
    mosquitto_deployed,
)
from gateway.topics import JOBS_PREFIX, MES_REPLY_PREFIX, MesTopics
from gateway_jobs.testing import JobsMes
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SERVICES = ("gateway-a", "gateway-b", "publisher", "simulator")
SCOPE = "cell1"
JOB = "AXLE-0001"


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return document


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``deploy/make-secrets.sh`` makes, made by it (in a copy of the script's folder)."""
    folder = tmp_path_factory.mktemp("deploy")
    shutil.copy(DEPLOY / "make-secrets.sh", folder / "make-secrets.sh")
    subprocess.run(["sh", str(folder / "make-secrets.sh")], check=True, capture_output=True)
    return folder / "secrets"


def secret(secrets: Path, name: str) -> str:
    return (secrets / name).read_text().strip()


@pytest.fixture(scope="module")
def broker(secrets: Path) -> Iterator[ServerProcess]:
    passwd = secrets.parent / "passwd"
    subprocess.run(
        ["sh", str(DEPLOY / "mosquitto" / "passwd.sh"), str(secrets), str(passwd)],
        env={"MOSQUITTO_PASSWD": find_executable("mosquitto_passwd"), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    files = {
        "config/acl": DEPLOY / "mosquitto" / "acl",
        "auth/passwd": passwd,
        # what compose.yaml's mosquitto command copies from the secrets
        "auth/tls-ca.pem": secrets / "mqtt_tls_ca.pem",
        "auth/tls-server.pem": secrets / "mqtt_tls_server.pem",
        "auth/tls-server.key": secrets / "mqtt_tls_server.key",
    }
    server = mosquitto_deployed(DEPLOY / "mosquitto" / "mosquitto.conf", files).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def redis(secrets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The compose redis service's command, paths and the server's address moved."""
    directory = tmp_path_factory.mktemp("redis")
    port = free_port()
    script = compose()["services"]["redis"]["command"][-1]
    executable = find_executable("redis-server")
    server = f"{executable} --port {port} --bind 127.0.0.1 --dir {directory} --save ''"
    script = (
        script.replace("$$", "$")
        .replace("/run/secrets/", f"{secrets}/")
        .replace("/data/", f"{directory}/")
        .replace("docker-entrypoint.sh redis-server", server)
    )
    process = ServerProcess("redis", ["sh", "-ec", script], port, directory).start()
    try:
        yield process
    finally:
        process.close()


@dataclass
class Deployment:
    broker: ServerProcess
    redis: ServerProcess
    secrets: Path
    directory: Path
    http_ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def mqtt_url(self, user: str) -> str:
        password = secret(self.secrets, {"mes": "mqtt_mes_password"}[user])
        return f"mqtt://{user}:{password}@127.0.0.1:{self.broker.port}"

    def environment(self, name: str, service: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        """The service's command and environment, as compose would give them here."""
        mounted = self.directory / f"{name}-secrets"  # only the secrets the service mounts
        mounted.mkdir(exist_ok=True)
        for secret_name in service["secrets"]:
            shutil.copy(self.secrets / secret_name, mounted / secret_name)
        environ = command_environ()
        for key, value in service["environment"].items():
            environ[key] = str(value).replace("/run/secrets/", f"{mounted}/")
        self.http_ports[name] = free_port()
        environ["GATEWAY_HTTP_PORT"] = str(self.http_ports[name])
        environ["GATEWAY_HTTP_HOST"] = "127.0.0.1"
        environ["GATEWAY_MQTT_URL"] = f"mqtt://127.0.0.1:{self.broker.port}"  # "mosquitto"
        environ["GATEWAY_REDIS_URL"] = f"redis://127.0.0.1:{self.redis.port}/0"  # "redis"
        config = "/etc/station-gateway/gateway.toml"
        command = [
            str(DEPLOY / "gateway.toml") if arg == config else arg for arg in service["command"]
        ]
        return command, environ

    def start(self) -> None:
        services = compose()["services"]
        for name in SERVICES:
            command, environ = self.environment(name, services[name])
            log = (self.directory / f"{name}.log").open("wb")
            self.processes[name] = subprocess.Popen(
                [*gateway_command(), *command], env=environ, stdout=log, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def get(self, name: str, path: str) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.http_ports[name]}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, None
        except OSError:
            return 0, None

    async def ready(self, name: str) -> bool:
        process = self.processes[name]
        assert process.poll() is None, f"{name} ended:\n{self.log(name)[-3000:]}"
        status, _ = await anyio.to_thread.run_sync(self.get, name, "/readyz")
        return status == 200


@pytest.fixture
async def deployment(
    broker: ServerProcess, redis: ServerProcess, secrets: Path, tmp_path: Path
) -> AsyncIterator[Deployment]:
    running = Deployment(broker, redis, secrets, tmp_path)
    running.start()
    try:
        for name in SERVICES:
            await poll_until(partial(running.ready, name), timeout=90, interval=0.2)
        yield running
    finally:
        running.stop()


async def cli(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    """``gateway ...`` as the MES's user on the shipped broker; no settings of the station."""
    where = ["-s", SCOPE, "--mqtt", deployment.mqtt_url("mes")]
    return await anyio.to_thread.run_sync(partial(run_gateway, *args, *where))


def start_watch(deployment: Deployment) -> subprocess.Popen[str]:
    where = ["-s", SCOPE, "--mqtt", deployment.mqtt_url("mes")]
    return subprocess.Popen(
        [*gateway_command(), "jobs", "watch", *where, "--json"],
        env=command_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@asynccontextmanager
async def watching(deployment: Deployment) -> AsyncIterator[IO[str]]:
    """``gateway jobs watch --json`` in the background, subscribed once it said so."""
    watcher = start_watch(deployment)
    try:
        assert watcher.stderr is not None
        assert watcher.stdout is not None
        with anyio.fail_after(60):
            first = await anyio.to_thread.run_sync(watcher.stderr.readline)
        assert first.startswith(f"watching {JOBS_PREFIX}/{SCOPE}/events"), first
        yield watcher.stdout
    finally:
        watcher.terminate()
        watcher.communicate(timeout=30)


async def test_the_shipped_station_commissioned_by_hand_and_seen_by_the_mes(
    deployment: Deployment, tmp_path: Path
) -> None:
    recipe = json.loads((ROOT / "examples" / "recipes" / "rear_axle.json").read_text())
    work_master = {"ID": "WM-AXLE", "Data": recipe, "DataSchema": DATASCHEMA}
    (tmp_path / "wm.json").write_text(json.dumps(work_master))
    order = {"JobOrderID": JOB, "WorkMasterID": [{"ID": "WM-AXLE"}], "Priority": 3}
    (tmp_path / "order.json").write_text(json.dumps(order))

    pushed = await cli(deployment, "config", "push", "workmaster", str(tmp_path / "wm.json"))
    assert pushed.returncode == 0, pushed.stderr
    async with watching(deployment) as events:
        stored = await cli(deployment, "jobs", "store", str(tmp_path / "order.json"), "--start")
        assert stored.returncode == 0, stored.stderr
        states: list[str] = []
        with anyio.fail_after(60):
            while not states or states[-1] not in ("Ended", "Aborted"):
                line = await anyio.to_thread.run_sync(events.readline)
                assert line, "the watcher ended"
                states.append(json.loads(line)["state"].split(".")[0])
    assert states[-1] == "Ended", states
    listed = await cli(deployment, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [job] = [job for job in json.loads(listed.stdout) if job["JobOrderID"] == JOB]
    assert job["JobState"][0]["StateText"]["Text"] == "Ended"

    # The MES, as the design document describes it, logged in as "mes" under the shipped ACL.
    async with connect_test_client(
        deployment.mqtt_url("mes"), reply_prefix=MES_REPLY_PREFIX
    ) as client:
        mes = MesClient(client, JOBS_PREFIX, SCOPE)
        seen = await mes.follow(lambda index: bool(index.job(JOB)), timeout=20)
        index = seen[-1][0]
        listed_job = index.job(JOB)
        assert listed_job is not None
        assert listed_job.state[:1] == ("Ended",)
        assert listed_job.has_result
        orders = await mes.retained("order", [JOB], timeout=10)
        results = await mes.retained("result", [JOB], timeout=10)
        queue = await JobsMes(client, JOBS_PREFIX, SCOPE).queue(timeout=10)
    assert orders[JOB]["JobOrderID"] == JOB
    assert results[JOB]["JobOrderID"] == JOB
    assert {entry["ID"] for entry in results[JOB]["JobResponseData"]} >= {"tighten", "verify"}
    assert queue["Online"] is True
    assert MesTopics().queue(SCOPE) == f"{JOBS_PREFIX}/{SCOPE}/queue"

    status, jobs = await anyio.to_thread.run_sync(
        deployment.get, "gateway-a", f"/api/scopes/{SCOPE}/jobs"
    )
    assert status == 200
    assert JOB in json.dumps(jobs)
    for name in SERVICES:  # nothing was refused on the way
        assert "refused by the broker" not in deployment.log(name), name
        assert "Traceback" not in deployment.log(name), name


async def test_the_mes_reaches_the_shipped_broker_over_tls_with_the_ca_make_secrets_made(
    broker: ServerProcess, secrets: Path
) -> None:
    """The listener compose publishes to the plant network: TLS with the certificate
    make-secrets.sh made for the broker. The MES's login connects trusting that CA; a client
    trusting only the system's CAs cannot verify the broker; a wrong password is refused."""
    assert broker.tls_port is not None
    station_ca = ssl.create_default_context(cafile=str(secrets / "mqtt_tls_ca.pem"))
    mes_password = secret(secrets, "mqtt_mes_password")

    def client(context: ssl.SSLContext, password: str) -> aiomqtt.Client:
        port = broker.tls_port or 0
        return aiomqtt.Client(
            "127.0.0.1", port, username="mes", password=password, tls_context=context, timeout=5
        )

    async with client(station_ca, mes_password) as connected:
        await connected.subscribe(f"{MES_REPLY_PREFIX}/probe", qos=1)
    with pytest.raises(aiomqtt.MqttError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
        async with client(ssl.create_default_context(), mes_password):
            pass
    with pytest.raises(aiomqtt.MqttError):
        async with client(station_ca, "wrong"):
            pass
