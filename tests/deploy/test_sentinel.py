"""``deploy/sentinel/compose.yaml``: layered over the compose station, it is a valid Compose
file whose gateways reach Redis through the Sentinels (no Docker needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from gateway_redis.settings import RedisSettings
from gateway_redis.topology import Topology
from tests.deploy.test_manifests import COMPOSE, DEPLOY, _tool

SENTINEL = DEPLOY / "sentinel" / "compose.yaml"


def merged(base: Any, layer: Any) -> Any:
    """What ``docker compose -f base -f layer`` does with mappings: merged key by key."""
    if isinstance(base, dict) and isinstance(layer, dict):
        result = dict(base)
        for key, value in layer.items():
            result[key] = merged(base[key], value) if key in base else value
        return result
    return layer


def test_the_sentinel_layer_makes_a_valid_compose_file(tmp_path: Path) -> None:
    project = merged(yaml.safe_load(COMPOSE.read_text()), yaml.safe_load(SENTINEL.read_text()))
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(project))
    checked = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    services = project["services"]
    assert {"redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"} <= set(services)
    for name in ("gateway-a", "gateway-b", "publisher", "simulator"):
        url = services[name]["environment"]["GATEWAY_REDIS_URL"]
        deployment = RedisSettings(url=url).deployment
        assert deployment.topology is Topology.SENTINEL
        assert {host for host, _ in deployment.nodes} == {"sentinel-1", "sentinel-2", "sentinel-3"}
        assert services[name]["environment"]["GATEWAY_REDIS_PASSWORD_FILE"]  # still the secret
