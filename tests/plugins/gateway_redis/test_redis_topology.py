"""``redis.url`` for one node, Sentinel and Cluster (parsing, no server)."""

from __future__ import annotations

import pytest

from gateway.app import load_gateway_settings
from gateway.errors import SettingsError
from gateway.plugins import build_plugin_manager
from gateway.settings import Secret, Settings
from gateway_redis.settings import RedisSettings, connection_options, masked_url
from gateway_redis.topology import Deployment, Topology, parse_deployment


def load(**environ: str) -> Settings:
    environ = {"GATEWAY_PLUGINS_ALLOW": "redis", **environ}
    return load_gateway_settings(build_plugin_manager(environ=environ), None, environ=environ)


@pytest.mark.parametrize(
    ("url", "deployment"),
    [
        ("redis://db:6379/2", Deployment(Topology.SINGLE)),
        ("rediss://db:6379/0", Deployment(Topology.SINGLE, tls=True)),
        (
            "redis+sentinel://s1:26379,s2:26380,s3/mymaster/3",
            Deployment(
                Topology.SENTINEL,
                (("s1", 26379), ("s2", 26380), ("s3", 26379)),
                service="mymaster",
                db=3,
            ),
        ),
        (
            "rediss+sentinel://gw:pw@[::1]:26379/main",
            Deployment(Topology.SENTINEL, (("::1", 26379),), service="main", tls=True),
        ),
        (
            "redis+cluster://n1:7000,n2:7001",
            Deployment(Topology.CLUSTER, (("n1", 7000), ("n2", 7001))),
        ),
        ("rediss+cluster://u:p@n1/0", Deployment(Topology.CLUSTER, (("n1", 6379),), tls=True)),
    ],
)
def test_urls_name_the_deployment(url: str, deployment: Deployment) -> None:
    assert parse_deployment(url) == deployment
    assert load(GATEWAY_REDIS_URL=url).get(RedisSettings).deployment == deployment


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://s1:26379",  # no master name
        "redis+sentinel://s1:26379/mymaster/x",
        "redis+sentinel://s1:26379,s2:999999/mymaster",
        "redis+cluster://n1:7000/mymaster",
        "redis+cluster://n1:7000/1",  # a Cluster has database 0 only
        "redis+replica://n1:7000",
    ],
)
def test_bad_deployment_urls_stop_start_up(url: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load(GATEWAY_REDIS_URL=url)
    assert "redis.url" in str(caught.value) or "[redis]" in str(caught.value)


def test_sentinel_credentials_and_tls() -> None:
    settings = RedisSettings(
        url="rediss+sentinel://gw:data-pw@s1:26379,s2:26379/mymaster/1",
        sentinel_password=Secret("sentinel-pw"),
    )
    assert settings.uses_tls
    options = connection_options(settings)
    assert (options["username"], options["password"], options["db"]) == ("gw", "data-pw", 1)
    assert options["ssl_cert_reqs"] == "required"
    assert masked_url(settings.url) == "rediss+sentinel://gw:********@s1:26379,s2:26379/mymaster/1"
