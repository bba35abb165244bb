"""``deploy/k8s-sentinel``: the Kustomize overlay that runs the Kubernetes station's Redis behind
Sentinel, checked as strictly as ``deploy/k8s`` (tests/deploy/test_manifests.py).

No kustomize or cluster is needed: ``render`` does what kustomize does with the few features the
overlay and its base use (resources, generators, JSON patches, labels, images) and refuses any
other, so a feature added later cannot be ignored here. The start scripts of the data nodes and
the Sentinels run for real (with stand-ins for the pod's host name and paths): the ACL they
write must be what a real redis-server takes.
"""

from __future__ import annotations

import copy
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import redis
import yaml

from gateway.app import settings_registry
from gateway.plugins import build_plugin_manager
from gateway.settings import SettingsRegistry, load_settings
from gateway.testing.services import ServerProcess, find_executable, free_port, running
from gateway_redis.settings import RedisSettings
from gateway_redis.topology import Topology
from tests.deploy.test_manifests import (
    DEPLOY,
    DOCKERFILE,
    KUBERNETES_VERSIONS,
    assert_hardened,
    read_dockerfile,
)

OVERLAY = DEPLOY / "k8s-sentinel"
RENDERED_KEYS = {
    "apiVersion",
    "kind",
    "labels",
    "resources",
    "configMapGenerator",
    "secretGenerator",
    "patches",
    "images",
}
SECRET_PATH = "/run/secrets/station-gateway/redis-password"
REPLICA_PATH = "/run/secrets/station-redis/redis-replica-password"
SENTINEL_PATH = "/run/secrets/station-redis/redis-sentinel-password"
# Each Redis user its own password (the run scripts' files).
PASSWORDS = {"gateway": "right-horse-battery", "replica": "copy-cat", "sentinel": "watch-dog"}


def render(directory: Path) -> list[dict[str, Any]]:
    """The documents ``kubectl kustomize directory`` prints (generated Secrets with empty
    values: their files are the operator's)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - RENDERED_KEYS
    assert not unknown, f"{directory.name}/kustomization.yaml: render() does not do {unknown}"
    documents: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        path = directory / resource
        if path.is_dir():
            documents += render(path)
        else:
            documents += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for kind, generators in (
        ("ConfigMap", kustomization.get("configMapGenerator", [])),
        ("Secret", kustomization.get("secretGenerator", [])),
    ):
        for generator in generators:
            documents.append(_generated(directory, kind, generator))
    for patch in kustomization.get("patches", []):
        operations = yaml.safe_load((directory / patch["path"]).read_text())
        (target,) = [
            d
            for d in documents
            if d["kind"] == patch["target"]["kind"]
            and d["metadata"]["name"] == patch["target"]["name"]
        ]
        for operation in operations:
            _apply(target, operation)
    for entry in kustomization.get("labels", []):
        assert set(entry) == {"pairs"}, entry  # metadata labels only, never selectors
        for document in documents:
            document["metadata"].setdefault("labels", {}).update(entry["pairs"])
    images = {image["name"]: image for image in kustomization.get("images", [])}
    for container in _containers(documents):
        name, _, _ = container["image"].partition(":")
        if name in images:
            container["image"] = f"{images[name]['newName']}:{images[name]['newTag']}"
    return documents


def _generated(directory: Path, kind: str, generator: dict[str, Any]) -> dict[str, Any]:
    options = generator.get("options", {})
    assert options.get("disableNameSuffixHash") is True, "the pods name it as written"
    data = {}
    for item in generator["files"]:
        key, _, file = item.rpartition("=")
        key = key or Path(file).name
        data[key] = (directory / file).read_text() if kind == "ConfigMap" else ""
    metadata = {"name": generator["name"], "labels": options.get("labels", {})}
    document = {"apiVersion": "v1", "kind": kind, "metadata": metadata, "data": data}
    if "type" in generator:
        document["type"] = generator["type"]
    return document


def _apply(document: dict[str, Any], operation: dict[str, Any]) -> None:
    """One JSON Patch ``add`` or ``replace`` (RFC 6902), the two the overlay uses."""
    assert operation["op"] in ("add", "replace"), operation
    *parents, last = operation["path"].strip("/").split("/")
    node: Any = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    value = copy.deepcopy(operation["value"])
    if isinstance(node, list):
        node.insert(len(node) if last == "-" else int(last), value)
        if operation["op"] == "replace":
            del node[int(last) + 1]
    else:
        assert operation["op"] == "add" or last in node, operation
        node[last] = value


def _containers(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        container
        for document in documents
        if document["kind"] in ("Deployment", "StatefulSet")
        for container in document["spec"]["template"]["spec"]["containers"]
    ]


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return render(OVERLAY)


def one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (document,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return document


def gateway_workloads(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in documents
        if d["kind"] in ("Deployment", "StatefulSet")
        and d["spec"]["template"]["spec"]["containers"][0].get("args", [])[:1] == ["run"]
    ]


def script(documents: list[dict[str, Any]], name: str) -> str:
    text = one(documents, "ConfigMap", "station-redis-scripts")["data"][name]
    assert isinstance(text, str)
    return text


# -- the manifests ----------------------------------------------------------------------------


def test_the_overlay_adds_redis_and_sentinels_to_the_base(documents: list[dict[str, Any]]) -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in render(DEPLOY / "k8s")}
    rendered = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert rendered - base == {
        ("ConfigMap", "station-redis-scripts"),
        ("Secret", "station-redis-secrets"),
        ("Service", "redis"),
        ("StatefulSet", "redis"),
        ("PodDisruptionBudget", "redis"),
        ("Service", "redis-sentinel"),
        ("StatefulSet", "redis-sentinel"),
        ("PodDisruptionBudget", "redis-sentinel"),
    }
    assert base <= rendered
    for document in documents:
        assert document["metadata"]["labels"]["app.kubernetes.io/part-of"] == "station-gateway"


def test_the_overlay_follows_the_kubernetes_schemas_strictly(
    documents: list[dict[str, Any]],
) -> None:
    for document in documents:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                name = document["metadata"]["name"]
                raise AssertionError(f"{document['kind']} {name} ({version}): {error}") from None


def test_every_workload_has_probes_resources_and_a_non_root_user(
    documents: list[dict[str, Any]],
) -> None:
    for workload in (d for d in documents if d["kind"] in ("Deployment", "StatefulSet")):
        assert_hardened(workload)


def sentinel_pods(documents: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """The Sentinels' addresses: StatefulSet pod names under their headless Service."""
    sentinels = one(documents, "StatefulSet", "redis-sentinel")
    service = one(documents, "Service", sentinels["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    (container,) = sentinels["spec"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"]]
    name = sentinels["metadata"]["name"]
    return {
        (f"{name}-{index}.{service['metadata']['name']}", port)
        for index in range(sentinels["spec"]["replicas"])
    }


def test_the_gateways_ask_the_sentinels_for_the_master(
    documents: list[dict[str, Any]], tmp_path: Path
) -> None:
    """GATEWAY_REDIS_URL names every Sentinel pod and the master name they monitor; the
    settings of each gateway container load as at start-up (the ConfigMap, the image's ENV,
    the container's environment, the Secret's files)."""
    registry: SettingsRegistry = settings_registry(build_plugin_manager(environ={}))
    image = read_dockerfile(DOCKERFILE)
    toml = tmp_path / "gateway.toml"
    toml.write_text(one(documents, "ConfigMap", "station-gateway-config")["data"]["gateway.toml"])
    password = tmp_path / "password"
    password.write_text("secret\n")
    workloads = gateway_workloads(documents)
    assert {w["metadata"]["name"] for w in workloads} == {
        "station-gateway",
        "station-gateway-publisher",
    }
    for workload in workloads:
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        environ = {**image.env}
        for variable in container["env"]:
            environ[variable["name"]] = str(variable.get("value", "pod-0"))
            if variable["name"].endswith("_FILE"):
                environ[variable["name"]] = str(password)
        settings = load_settings(registry, toml, environ).section("redis")
        deployment = RedisSettings(url=settings.url).deployment
        assert deployment.topology is Topology.SENTINEL, workload["metadata"]["name"]
        assert set(deployment.nodes) == sentinel_pods(documents)
        monitor = f"sentinel monitor {deployment.service} %s 6379 2"  # quorum 2 of 3
        assert monitor in script(documents, "sentinel.sh")
        for name in ("redis.sh", "sentinel.sh"):  # who is master now, after a failover
            assert f"get-master-addr-by-name {deployment.service} " in script(documents, name)
        assert settings.password is not None
        assert settings.username == "gateway"


def test_the_data_nodes_are_a_master_and_a_replica_that_others_reach_by_name(
    documents: list[dict[str, Any]],
) -> None:
    nodes = one(documents, "StatefulSet", "redis")
    service = one(documents, "Service", nodes["spec"]["serviceName"])
    assert nodes["spec"]["replicas"] == 2
    assert nodes["spec"]["podManagementPolicy"] == "OrderedReady"  # redis-0 first
    for headless in (service, one(documents, "Service", "redis-sentinel")):
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["publishNotReadyAddresses"] is True
    first = f"{nodes['metadata']['name']}-0.{service['metadata']['name']}"
    for name in ("redis.sh", "sentinel.sh"):
        text = script(documents, name)
        assert f"master={first}" in text, name
        assert SENTINEL_PATH in text, name
        # The data nodes write every user's password digest; a Sentinel knows only its own.
        assert (SECRET_PATH in text and REPLICA_PATH in text) is (name == "redis.sh"), name
        hosts = " ".join(sorted(host.partition(".")[0] for host, _ in sentinel_pods(documents)))
        assert f"for sentinel in {hosts}; do" in text, name
    sentinels = one(documents, "StatefulSet", "redis-sentinel")
    for workload in (nodes, sentinels):
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        secrets = {
            volume["secret"]["secretName"]: mounts[name]
            for name, volume in volumes.items()
            if "secret" in volume
        }
        assert f"{secrets['station-redis-secrets']}/redis-sentinel-password" == SENTINEL_PATH
        if workload is nodes:
            assert f"{secrets['station-gateway-secrets']}/redis-password" == SECRET_PATH
        else:  # no gateway data for a Sentinel's login
            assert "station-gateway-secrets" not in secrets
        assert volumes["scripts"]["configMap"]["name"] == "station-redis-scripts"
        assert container["command"][-1].startswith(mounts["scripts"] + "/")
    sentinel = script(documents, "sentinel.sh")
    assert "sentinel down-after-milliseconds station 5000" in sentinel
    assert "sentinel auth-user station sentinel" in sentinel


# -- the start scripts, run -------------------------------------------------------------------


def run_script(
    documents: list[dict[str, Any]], name: str, hostname: str, tmp_path: Path
) -> list[str]:
    """Run ``name`` as pod ``hostname`` would (no Sentinel answering: the first start), with
    stand-ins for ``hostname``, ``redis-cli`` and ``redis-server``, the pod's paths moved under
    ``tmp_path``; returns the arguments it started redis-server with."""
    bin_directory = tmp_path / "bin"
    bin_directory.mkdir(parents=True, exist_ok=True)
    stand_ins = {
        "hostname": f"echo {hostname}",
        "redis-cli": "exit 1",  # no Sentinel answers
        "redis-server": f'printf "%s\\n" "$@" > {tmp_path}/arguments',
    }
    for command, body in stand_ins.items():
        path = bin_directory / command
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    (tmp_path / "data").mkdir(exist_ok=True)
    text = script(documents, name)
    for secret, user in (
        (SECRET_PATH, "gateway"),
        (REPLICA_PATH, "replica"),
        (SENTINEL_PATH, "sentinel"),
    ):
        file = tmp_path / f"{user}-password"
        file.write_text(PASSWORDS[user] + "\n")
        text = text.replace(secret, str(file))
    text = text.replace("/data", str(tmp_path / "data"))
    (tmp_path / name).write_text(text)
    environ = {"PATH": f"{bin_directory}:/usr/bin:/bin"}
    subprocess.run(["sh", str(tmp_path / name)], env=environ, check=True, timeout=30)
    return (tmp_path / "arguments").read_text().splitlines()


def test_the_sentinels_first_start_monitors_redis_0(
    documents: list[dict[str, Any]], tmp_path: Path
) -> None:
    arguments = run_script(documents, "sentinel.sh", "redis-sentinel-1", tmp_path)
    config = (tmp_path / "data" / "sentinel.conf").read_text().splitlines()
    assert arguments == [str(tmp_path / "data" / "sentinel.conf"), "--sentinel"]
    assert "sentinel monitor station redis-0.redis 6379 2" in config
    assert "sentinel announce-ip redis-sentinel-1.redis-sentinel" in config
    assert f"sentinel auth-pass station {PASSWORDS['sentinel']}" in config


@pytest.mark.integration
def test_the_data_nodes_start_as_master_and_replica_with_their_acl(
    documents: list[dict[str, Any]], tmp_path: Path
) -> None:
    replica = run_script(documents, "redis.sh", "redis-1", tmp_path / "replica")
    assert replica[-3:] == ["--replicaof", "redis-0.redis", "6379"]
    master = run_script(documents, "redis.sh", "redis-0", tmp_path / "master")
    assert "--replicaof" not in master
    assert master[master.index("--min-replicas-to-write") + 1] == "1"
    # The master as the script starts it, on a free loopback port: the ACL must load.
    toml = one(documents, "ConfigMap", "station-gateway-config")["data"]["gateway.toml"]
    prefix = tomllib.loads(toml)["redis"]["key_prefix"]
    port = free_port()
    server = ServerProcess(
        "redis",
        [find_executable("redis-server"), *master, "--port", str(port), "--bind", "127.0.0.1"],
        port,
        tmp_path / "master",
    )
    with running(server):

        def login(user: str, password: str | None = None) -> redis.Redis:
            return redis.Redis(
                port=port,
                username=user,
                password=password or PASSWORDS[user],
                decode_responses=True,
            )

        with login("gateway") as gateway:
            assert gateway.get(f"{prefix}:{{cell1}}:job:J1") is None  # its keys
            with pytest.raises(redis.exceptions.NoPermissionError):
                gateway.get("other:key")
            with pytest.raises(redis.exceptions.NoPermissionError):
                gateway.config_get("maxmemory")
        with login("sentinel") as sentinel:
            assert sentinel.execute_command("ROLE")[0] == "master"
            assert sentinel.info("replication")["role"] == "master"
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(port=port, password="right-horse-battery").ping()  # default: off
        for user, other in (("gateway", "sentinel"), ("gateway", "replica")):
            with (
                pytest.raises(redis.exceptions.AuthenticationError),
                login(user, PASSWORDS[other]) as wrong,
            ):
                wrong.ping()  # another user's password opens no gateway data
