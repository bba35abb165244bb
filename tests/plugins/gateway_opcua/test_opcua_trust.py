"""``opcua.trusted_clients``: only clients with a trusted application certificate open a session.

One gateway serves OPC UA with a trust list holding the test MES's certificate, over real Redis
and mosquitto; asyncua clients connect with that certificate, with another one, with the trusted
one made out for another ApplicationUri, and with an untrusted one left out of CreateSession.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from asyncua.ua.uaerrors import (
    BadCertificateUntrusted,
    BadCertificateUriInvalid,
    BadUserAccessDenied,
)

from gateway.app import Gateway
from gateway.errors import GatewayError
from gateway.testing import poll_until, running
from gateway.testing.services import free_port
from gateway_jobs.model import ReturnStatus
from gateway_opcua.security import ClientTrust
from gateway_opcua.testing import (
    CLIENT_URI,
    PASSWORD,
    SCOPE,
    USER,
    JobsClient,
    client_certificate,
    station_environment,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

Certificates = tuple[Path, Path]


@pytest.fixture(scope="module")
async def trusting_station(
    mqtt_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, Certificates, Certificates]]:
    """The endpoint, the trusted MES's certificate and key, and a stranger's."""
    name = f"t{uuid.uuid4().hex[:12]}"
    data_dir = tmp_path_factory.mktemp("opcua-trust")
    for directory in ("mes", "stranger", "trusted"):
        (data_dir / directory).mkdir()
    trusted_mes = await client_certificate(data_dir / "mes")
    stranger = await client_certificate(data_dir / "stranger")
    trust_list = data_dir / "trusted"
    shutil.copy(trusted_mes[0], trust_list)  # the certificate only: no private key there
    port = free_port()
    environment = station_environment(name, mqtt_url, redis_url, data_dir, "a", port, "all")
    environment["GATEWAY_OPCUA_TRUSTED_CLIENTS"] = str(trust_list)
    async with running(Gateway.from_environment(None, environment)):
        yield f"opc.tcp://127.0.0.1:{port}", trusted_mes, stranger


@asynccontextmanager
async def session(
    endpoint: str,
    certificates: Certificates,
    *,
    application_uri: str = CLIENT_URI,
    leave_out_certificate: bool = False,
) -> AsyncIterator[JobsClient]:
    """A logged-in SignAndEncrypt session; ``leave_out_certificate``: the client opens the
    secure channel with its certificate but sends none in CreateSession."""
    client = Client(endpoint, timeout=30)
    client.application_uri = application_uri
    client.set_user(USER)
    client.set_password(PASSWORD)
    certificate, key = certificates
    await client.set_security(
        SecurityPolicyBasic256Sha256,
        str(certificate),
        str(key),
        mode=ua.MessageSecurityMode.SignAndEncrypt,
    )
    if leave_out_certificate:
        create_session = client.uaclient.create_session

        async def without_certificate(params: ua.CreateSessionParameters) -> Any:
            params.ClientCertificate = None
            return await create_session(params)

        client.uaclient.create_session = without_certificate
    async with client:
        yield JobsClient(client, SCOPE)


async def answers(client: JobsClient) -> bool:
    status, _ = await client.job_response("no-such-job")
    return bool(status == ReturnStatus.UNKNOWN_JOB_ORDER_ID)


async def test_a_trusted_client_is_served(
    trusting_station: tuple[str, Certificates, Certificates],
) -> None:
    endpoint, trusted, _ = trusting_station
    async with session(endpoint, trusted) as client:
        assert await answers(client)


async def test_an_untrusted_client_is_refused_and_others_still_served(
    trusting_station: tuple[str, Certificates, Certificates], caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, trusted, stranger = trusting_station
    with caplog.at_level(logging.WARNING, "gateway_opcua"), pytest.raises(BadCertificateUntrusted):
        async with session(endpoint, stranger):
            pass
    assert f"client {CLIENT_URI!r} refused" in caplog.text
    assert "BadCertificateUntrusted" in caplog.text
    async with session(endpoint, trusted) as client:
        assert await answers(client)


async def test_a_trusted_certificate_for_another_application_is_refused(
    trusting_station: tuple[str, Certificates, Certificates],
) -> None:
    endpoint, trusted, _ = trusting_station
    with pytest.raises(BadCertificateUriInvalid):
        async with session(endpoint, trusted, application_uri="urn:someone:else"):
            pass


async def test_leaving_the_certificate_out_of_create_session_does_not_get_around_it(
    trusting_station: tuple[str, Certificates, Certificates], caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, trusted, stranger = trusting_station
    with caplog.at_level(logging.WARNING, "gateway_opcua"), pytest.raises(BadUserAccessDenied):
        async with session(endpoint, stranger, leave_out_certificate=True):
            pass
    assert "a client refused" in caplog.text
    async with session(endpoint, trusted, leave_out_certificate=True) as client:
        assert await answers(client)  # the channel's certificate is the trusted one


async def test_a_trust_list_that_trusts_nobody_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(GatewayError, match="is not a directory"):
        await ClientTrust.load(tmp_path / "missing", None)
    with pytest.raises(GatewayError, match="no certificate"):
        await ClientTrust.load(tmp_path, None)
    (tmp_path / "mes").mkdir()
    _, key = await client_certificate(tmp_path / "mes")
    shutil.copy(key, tmp_path / "key.pem")
    with pytest.raises(GatewayError, match="keep private keys elsewhere"):
        await ClientTrust.load(tmp_path, None)


async def reloading_station(
    mqtt_url: str,
    redis_url: str,
    tmp_path: Path,
    trusted: Sequence[str],
    untrusted: Sequence[str] = (),
) -> tuple[Gateway, str, Path, dict[str, Certificates]]:
    """A gateway whose trust list, read again every 0.1 s, holds the certificates of the
    clients ``trusted``: the gateway, its endpoint, the trust list's directory, and each
    client's certificate and key."""
    clients: dict[str, Certificates] = {}
    for client in (*trusted, *untrusted):
        (tmp_path / client).mkdir()
        clients[client] = await client_certificate(tmp_path / client)
    trust_list = tmp_path / "trusted"
    trust_list.mkdir()
    for client in trusted:
        shutil.copy(clients[client][0], trust_list / f"{client}.der")
    port = free_port()
    name = f"t{uuid.uuid4().hex[:12]}"
    environment = station_environment(name, mqtt_url, redis_url, tmp_path, "a", port, "all")
    environment["GATEWAY_OPCUA_TRUSTED_CLIENTS"] = str(trust_list)
    environment["GATEWAY_OPCUA_TRUST_POLL_SECONDS"] = "0.1"
    gateway = Gateway.from_environment(None, environment)
    return gateway, f"opc.tcp://127.0.0.1:{port}", trust_list, clients


async def test_a_change_to_the_trust_list_applies_without_a_restart(
    mqtt_url: str, redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client certificate copied into ``trusted_clients`` is trusted, one removed is not,
    within ``trust_poll_seconds``; a file that is not a certificate is refused in the log and
    the list in force stays."""
    gateway, endpoint, trust_list, clients = await reloading_station(
        mqtt_url, redis_url, tmp_path, trusted=["mes"], untrusted=["stranger"]
    )
    mes, stranger = clients["mes"], clients["stranger"]

    async def served(certificates: Certificates) -> bool:
        try:
            async with session(endpoint, certificates) as client:
                return await answers(client)
        except BadCertificateUntrusted:
            return False
        except ConnectionError:  # opened just before the list changed, and cut off
            return False

    async def refused(certificates: Certificates) -> bool:
        return not await served(certificates)

    async with running(gateway):
        assert await served(mes)
        assert not await served(stranger)

        shutil.copy(stranger[0], trust_list / "stranger.der")
        await poll_until(lambda: served(stranger))
        (trust_list / "mes.der").unlink()
        await poll_until(lambda: refused(mes))

        with caplog.at_level(logging.ERROR, "gateway_opcua"):
            shutil.copy(stranger[1], trust_list / "key.pem")  # a private key, by mistake

            async def reported() -> bool:
                return "trust list not reloaded" in caplog.text

            await poll_until(reported)
        assert await served(stranger)  # the list in force stays
        assert not await served(mes)


async def test_a_client_no_longer_trusted_is_cut_off_and_the_others_stay_served(
    mqtt_url: str, redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Removing a client's certificate from ``trusted_clients`` closes its open connection,
    session and all, within ``trust_poll_seconds``; the session of a client still trusted goes
    on."""
    gateway, endpoint, trust_list, clients = await reloading_station(
        mqtt_url, redis_url, tmp_path, trusted=["mes", "line"]
    )
    mes, line = clients["mes"], clients["line"]

    async def cut_off(client: JobsClient) -> bool:
        try:
            await answers(client)
        except ConnectionError:  # asyncua's answer once the server closed the connection
            return True
        return False

    async with (
        running(gateway),
        session(endpoint, mes) as revoked,
        session(endpoint, line) as kept,
    ):
        assert await answers(revoked)
        assert await answers(kept)
        with caplog.at_level(logging.WARNING, "gateway_opcua"):
            (trust_list / "mes.der").unlink()
            await poll_until(lambda: cut_off(revoked))
        closed = [record.getMessage() for record in caplog.records if "closed" in record.msg]
        assert len(closed) == 1, closed
        assert closed[0].startswith("OPC UA: connection from 127.0.0.1:")
        assert closed[0].endswith(": BadCertificateUntrusted")
        assert await answers(kept)  # the same session, still served
