"""The [redis] settings section and the connection options derived from it (no server)."""

from __future__ import annotations

import pytest

from gateway.app import load_gateway_settings
from gateway.errors import SettingsError
from gateway.plugins import build_plugin_manager
from gateway.settings import Secret, Settings
from gateway_redis.settings import (
    RedisSettings,
    connection_options,
    connection_url,
    masked_url,
)


def load(**environ: str) -> Settings:
    environ = {"GATEWAY_PLUGINS_ALLOW": "redis", **environ}
    return load_gateway_settings(build_plugin_manager(environ=environ), None, environ=environ)


def test_defaults_mean_embedded_redis_with_gw_prefix() -> None:
    settings = load().get(RedisSettings)
    assert settings.embedded
    assert settings.key_prefix == "gw"
    assert settings.change_stream_maxlen == 10000
    assert (settings.dedupe_ttl_seconds, settings.dedupe_lease_seconds) == (86400, 30)
    assert settings.password is None
    assert not settings.uses_tls


def test_environment_overrides_and_password_is_masked() -> None:
    settings = load(
        GATEWAY_REDIS_URL="redis://db.example:6380/2",
        GATEWAY_REDIS_PASSWORD="s3cret-pw",
        GATEWAY_REDIS_DEDUPE_LEASE_SECONDS="1",
    )
    redis = settings.get(RedisSettings)
    assert redis.password == Secret("s3cret-pw")
    assert redis.dedupe_lease_seconds == 1
    assert settings.masked()["redis"]["password"] == "********"
    assert "s3cret-pw" not in repr(redis)


@pytest.mark.parametrize(
    ("variable", "value", "element"),
    [
        ("GATEWAY_REDIS_URL", "http://db:6379", "redis.url"),
        ("GATEWAY_REDIS_URL", "redis://db:99999/0", "redis.url"),
        ("GATEWAY_REDIS_KEY_PREFIX", "gw{x}", "[redis]"),
        ("GATEWAY_REDIS_KEY_PREFIX", "", "[redis]"),
        ("GATEWAY_REDIS_CHANGE_STREAM_MAXLEN", "10", "redis.change_stream_maxlen"),
        ("GATEWAY_REDIS_TLS", "maybe", "redis.tls"),
    ],
)
def test_bad_values_stop_start_up_naming_the_key(variable: str, value: str, element: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load(**{variable: value})
    assert caught.value.element == element


def test_masked_url_hides_only_the_password() -> None:
    assert masked_url("redis://user:pw@db:6379/0") == "redis://user:********@db:6379/0"
    assert masked_url("redis://:pw@db:6379") == "redis://:********@db:6379"
    assert masked_url("redis://db:6379") == "redis://db:6379"


def test_tls_is_implied_by_rediss_or_forced_by_the_setting() -> None:
    implied = RedisSettings(url="rediss://db:6380", tls_ca_file="/ca.pem", tls_verify=False)
    assert implied.uses_tls
    assert connection_options(implied) == {
        "ssl_cert_reqs": "none",
        "ssl_check_hostname": False,
        "ssl_ca_certs": "/ca.pem",
    }
    forced = RedisSettings(
        url="redis://db:6380", tls=True, tls_cert_file="/c.pem", tls_key_file="/k.pem"
    )
    assert connection_url(forced) == "rediss://db:6380"
    assert connection_options(forced) == {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem",
    }
    assert "ssl_cert_reqs" not in connection_options(RedisSettings(url="redis://db"))


def test_explicit_credentials_take_priority_over_the_url() -> None:
    from_url = RedisSettings(url="redis://alice:p%40ss@db:6379/1")
    assert connection_url(from_url) == "redis://db:6379/1"
    assert connection_options(from_url) == {"username": "alice", "password": "p@ss"}
    explicit = RedisSettings(
        url="redis://alice:old@db:6379/1", username="bob", password=Secret("new")
    )
    assert connection_options(explicit) == {"username": "bob", "password": "new"}
