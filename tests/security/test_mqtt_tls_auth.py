"""MQTT over TLS: username/password and client certificates; refused credentials stop start-up.

The brokers are real mosquitto processes with a TLS listener only (certificates made by
``openssl`` in the session fixture ``tls_certificates``), no anonymous access, and a password file
made by ``mosquitto_passwd``. Passwords reach the gateway the way a container gets them: from a
file named by ``GATEWAY_MQTT_PASSWORD_FILE``.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace

import aiomqtt
import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_client_message, from_mqtt, publish, to_mqtt
from gateway.errors import GatewayError, SettingsError
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running, wait_until
from gateway.testing.services import ServerProcess, TestCertificates, mosquitto_secure
from gateway.transport import Processor, Subscription

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

USER = "station-1"
# Distinctive, so a test can tell whether one leaked into a message or a log line.
PASSWORD = f"mqtt-pw-{uuid.uuid4().hex}"
WRONG_PASSWORD = f"wrong-pw-{uuid.uuid4().hex}"
ECHO = "com.example.security.echo.v1"

SecretFile = Callable[[str], str]
Request = Callable[[str, CloudEvent], Awaitable[CloudEvent]]


@pytest.fixture(scope="module")
def password_broker(tls_certificates: TestCertificates) -> Iterator[ServerProcess]:
    """TLS listener, password file, no anonymous clients."""
    broker = mosquitto_secure(tls_certificates, passwords={USER: PASSWORD}).start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def certificate_broker(tls_certificates: TestCertificates) -> Iterator[ServerProcess]:
    """TLS listener requiring a client certificate from the test CA (its CN is the user)."""
    broker = mosquitto_secure(tls_certificates, require_certificate=True).start()
    try:
        yield broker
    finally:
        broker.close()


class Echo:
    """Answers ``ECHO`` commands on ``<root>/+/commands``."""

    def __init__(self, topic_root: str) -> None:
        self.topic_root = topic_root

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
            return [event.reply(source="urn:gw", data={"echo": event.data})]

        register(Processor("echo", [Subscription(f"{self.topic_root}/+/commands")], handle))


def mqtt_gateway(environ: Mapping[str, str], *extra: object) -> Gateway:
    """A gateway with the MQTT binding only (and ``extra`` plugins), retrying fast."""
    base = {
        "GATEWAY_PLUGINS_ALLOW": "mqtt",
        "GATEWAY_GATEWAY_INSTANCE_ID": f"sec-{uuid.uuid4().hex[:8]}",
        "GATEWAY_MQTT_RECONNECT_MIN_SECONDS": "0.05",
        "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "0.2",
    }
    plugins = {f"extra{index}": plugin for index, plugin in enumerate(extra)}
    return Gateway.from_environment(None, {**base, **environ}, extra_plugins=plugins)


@asynccontextmanager
async def tls_mes(
    port: int,
    certificates: TestCertificates,
    *,
    username: str | None = None,
    password: str | None = None,
    client_certificate: bool = False,
) -> AsyncIterator[Request]:
    """Plays the MES over the TLS broker (``gateway.testing.mqtt``'s client is plain MQTT):
    yields ``request(topic, event) -> reply``."""
    context = ssl.create_default_context(cafile=str(certificates.ca))
    if client_certificate:
        context.load_cert_chain(certificates.client_cert, certificates.client_key)
    client_id = f"mes-{uuid.uuid4().hex[:8]}"
    reply_topic = f"test-replies/{client_id}"
    async with aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier=client_id,
        username=username,
        password=password,
        protocol=aiomqtt.ProtocolVersion.V5,
        tls_context=context,
    ) as client:
        await client.subscribe(reply_topic, qos=1)

        async def request(topic: str, event: CloudEvent) -> CloudEvent:
            correlation = uuid.uuid4().hex.encode()
            message = replace(
                to_mqtt(event, topic), response_topic=reply_topic, correlation_data=correlation
            )
            await publish(client, message)
            with anyio.fail_after(5):
                async for received in client.messages:
                    reply = from_client_message(received)
                    if reply.correlation_data == correlation:
                        return from_mqtt(reply)
            raise AssertionError("the connection closed before the reply came")

        yield request


def echo_command(n: int) -> CloudEvent:
    return CloudEvent(type=ECHO, source="urn:mes", subject="s1", data={"n": n})


# -- connecting -------------------------------------------------------------------------------


async def test_username_and_password_over_tls(
    password_broker: ServerProcess,
    tls_certificates: TestCertificates,
    secret_file: SecretFile,
    all_logs: pytest.LogCaptureFixture,
    unique: str,
) -> None:
    port = password_broker.port
    gateway = mqtt_gateway(
        {
            "GATEWAY_MQTT_URL": f"mqtts://127.0.0.1:{port}",
            "GATEWAY_MQTT_USERNAME": USER,
            "GATEWAY_MQTT_PASSWORD_FILE": secret_file(PASSWORD),
            "GATEWAY_MQTT_TLS_CA_FILE": str(tls_certificates.ca),
            "GATEWAY_MQTT_SHARE_GROUP": unique,
        },
        Echo(unique),
    )
    async with (
        running(gateway),
        tls_mes(port, tls_certificates, username=USER, password=PASSWORD) as request,
    ):
        reply = await request(f"{unique}/s1/commands", echo_command(1))
    assert reply.data == {"echo": {"n": 1}}
    assert reply.errorcode is None
    assert f"MQTT connected to 127.0.0.1:{port}" in all_logs.text
    assert PASSWORD not in all_logs.text  # paho's packet traces and the settings log included


async def test_client_certificate_over_tls(
    certificate_broker: ServerProcess,
    tls_certificates: TestCertificates,
    all_logs: pytest.LogCaptureFixture,
    unique: str,
) -> None:
    port = certificate_broker.port
    gateway = mqtt_gateway(
        {
            # The server certificate names localhost too: host name checking is on.
            "GATEWAY_MQTT_URL": f"mqtts://localhost:{port}",
            "GATEWAY_MQTT_TLS_CA_FILE": str(tls_certificates.ca),
            "GATEWAY_MQTT_TLS_CERT_FILE": str(tls_certificates.client_cert),
            "GATEWAY_MQTT_TLS_KEY_FILE": str(tls_certificates.client_key),
            "GATEWAY_MQTT_SHARE_GROUP": unique,
        },
        Echo(unique),
    )
    async with (
        running(gateway),
        tls_mes(port, tls_certificates, client_certificate=True) as request,
    ):
        reply = await request(f"{unique}/s1/commands", echo_command(2))
    assert reply.data == {"echo": {"n": 2}}
    assert f"MQTT connected to localhost:{port}" in all_logs.text


# -- refused ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong password", "refused"),
        ("no password", "refused"),
        ("no client certificate", "requires a client certificate"),
        ("untrusted CA", "certificate is not trusted"),
    ],
)
async def test_refused_credentials_stop_start_up_with_a_clear_message(
    request: pytest.FixtureRequest,
    tls_certificates: TestCertificates,
    secret_file: SecretFile,
    all_logs: pytest.LogCaptureFixture,
    case: str,
    expected: str,
) -> None:
    certificates = tls_certificates
    environ = {"GATEWAY_MQTT_TLS_CA_FILE": str(certificates.ca)}
    if case == "no client certificate":
        broker: ServerProcess = request.getfixturevalue("certificate_broker")
    else:
        broker = request.getfixturevalue("password_broker")
        environ["GATEWAY_MQTT_USERNAME"] = USER
        if case != "no password":
            password = WRONG_PASSWORD if case == "wrong password" else PASSWORD
            environ["GATEWAY_MQTT_PASSWORD_FILE"] = secret_file(password)
        if case == "untrusted CA":
            environ["GATEWAY_MQTT_TLS_CA_FILE"] = str(certificates.other_ca)
    where = f"127.0.0.1:{broker.port}"
    gateway = mqtt_gateway({"GATEWAY_MQTT_URL": f"mqtts://{where}", **environ})
    with anyio.fail_after(10), pytest.raises(GatewayError) as raised:
        await gateway.run()
    message = str(raised.value)
    assert f"MQTT broker {where}" in message
    assert expected in message
    for secret in (PASSWORD, WRONG_PASSWORD):
        assert secret not in message
        assert secret not in all_logs.text


async def test_a_wrong_password_in_the_url_is_not_shown_either(
    password_broker: ServerProcess, tls_certificates: TestCertificates
) -> None:
    where = f"127.0.0.1:{password_broker.port}"
    gateway = mqtt_gateway(
        {
            "GATEWAY_MQTT_URL": f"mqtts://{USER}:{WRONG_PASSWORD}@{where}",
            "GATEWAY_MQTT_TLS_CA_FILE": str(tls_certificates.ca),
        }
    )
    with anyio.fail_after(10), pytest.raises(GatewayError) as raised:
        await gateway.run()
    assert f"MQTT broker {where} refused" in str(raised.value)
    assert WRONG_PASSWORD not in str(raised.value)


async def test_a_plain_connection_to_the_tls_listener_is_retried_instead_of_hanging(
    password_broker: ServerProcess,
) -> None:
    """The broker drops it before CONNACK; aiomqtt alone would wait for that CONNACK forever."""
    gateway = mqtt_gateway(
        {
            "GATEWAY_MQTT_URL": f"mqtt://127.0.0.1:{password_broker.port}",
            "GATEWAY_MQTT_USERNAME": USER,
            "GATEWAY_MQTT_PASSWORD": PASSWORD,
        }
    )
    binding = gateway.binding("mqtt")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(gateway.run)
        await wait_until(lambda: binding.reconnects >= 2)  # type: ignore[attr-defined]
        assert not binding.ready  # retrying, not connected
        assert not gateway.started
        tasks.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("variables", "element"),
    [
        ({"GATEWAY_MQTT_TLS_CERT_FILE": "/nonexistent/client.pem"}, "mqtt.tls_cert_file"),
        ({"GATEWAY_MQTT_TLS_CA_FILE": "/nonexistent/ca.pem"}, "mqtt.tls_ca_file"),
        ({"GATEWAY_MQTT_TLS_KEY_FILE": "/nonexistent/client.key"}, "mqtt.tls_key_file"),
    ],
)
def test_an_unreadable_tls_file_stops_start_up_naming_its_setting(
    tls_certificates: TestCertificates, variables: dict[str, str], element: str
) -> None:
    environ = {
        "GATEWAY_MQTT_URL": "mqtts://127.0.0.1:8883",
        "GATEWAY_MQTT_TLS_CA_FILE": str(tls_certificates.ca),
        **variables,
    }
    with pytest.raises(SettingsError) as raised:
        mqtt_gateway(environ)
    assert raised.value.element == element
    assert "/nonexistent/" in raised.value.reason or "is set" in raised.value.reason
