"""Who may connect: Basic256Sha256 message security, the server certificate, user and password,
and (with ``trusted_clients``) the client application certificates trusted.

The server offers Basic256Sha256 with SignAndEncrypt, with Sign too when ``security = "Sign"``,
and without security only when ``security = "None"``. Every client logs in with the configured
user name and password; anonymous sessions are refused. Without ``trusted_clients`` any client
application certificate is accepted (the password authenticates; with ``SignAndEncrypt`` it
travels encrypted either way). With it, a client's certificate must be in that directory or
issued by a CA there, valid now, not revoked (``revocation_lists``), made out for the client's
ApplicationUri and for client use. It is checked twice: when the session is created, which
answers an honest client with the precise status (``BadCertificateUntrusted``...), and when it
is activated, on the certificate the secure channel was opened with: a client that leaves its
certificate out of CreateSession gets no further than ``BadUserAccessDenied``. The list is
read again when its files change, and the connections it no longer trusts are closed.
"""

from __future__ import annotations

import hmac
import logging
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from asyncua import Server, ua
from asyncua.common.utils import ServiceError
from asyncua.crypto.cert_gen import setup_self_signed_certificate
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.crypto.truststore import TrustStore
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gateway.errors import GatewayError
from gateway_opcua.logins import FailedLogins
from gateway_opcua.settings import OpcUaSettings, SecurityMode

if TYPE_CHECKING:
    from asyncua.server.internal_server import InternalServer

log = logging.getLogger(__name__)

POLICIES = {
    SecurityMode.SIGN_AND_ENCRYPT: [ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt],
    SecurityMode.SIGN: [
        ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
        ua.SecurityPolicyType.Basic256Sha256_Sign,
    ],
    SecurityMode.NONE: [
        ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
        ua.SecurityPolicyType.Basic256Sha256_Sign,
        ua.SecurityPolicyType.NoSecurity,
    ],
}


class ClientTrust:
    """The client application certificates trusted: ``trusted_clients`` and its CRLs, read at
    start and again whenever a file in either directory changes (``reload_if_changed``)."""

    def __init__(
        self, trusted: Path, revocation_lists: Path | None, store: TrustStore, seen: Fingerprint
    ) -> None:
        self._trusted = trusted
        self._revocation_lists = revocation_lists
        self._seen = seen  # the files ``store`` was read from
        self._use(store)

    @classmethod
    async def load(cls, trusted: Path, revocation_lists: Path | None) -> ClientTrust:
        """Read the directories; a trust list that trusts nobody is refused."""
        seen = await anyio.to_thread.run_sync(_fingerprint, trusted, revocation_lists)
        store = await _read(trusted, revocation_lists)
        # asyncua logs each untrusted certificate with a traceback; ``refused`` says it once.
        logging.getLogger("asyncuagds.validate").setLevel(logging.CRITICAL)
        return cls(trusted, revocation_lists, store, seen)

    async def reload_if_changed(self) -> bool:
        """Read the directories again if a file in them was added, removed or replaced
        (``True``: a new list is in force; ``drop_distrusted`` then closes the connections it
        no longer trusts). A change that leaves no certificate, or brings a file that is not
        one, is refused once in the log, and the list in force stays until the directories
        change again."""
        seen = await anyio.to_thread.run_sync(_fingerprint, self._trusted, self._revocation_lists)
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            store = await _read(self._trusted, self._revocation_lists)
        except GatewayError as error:
            log.error("OPC UA: trust list not reloaded, the one in force stays: %s", error)
            return False
        self._use(store)
        log.info("OPC UA: trust list reloaded from %s", self._trusted)
        return True

    def _use(self, store: TrustStore) -> None:
        self._store = store
        options = CertificateValidatorOptions.TRUSTED_VALIDATION
        self._validator = CertificateValidator(
            options | CertificateValidatorOptions.PEER_CLIENT, store
        )

    async def check_session(
        self, certificate: x509.Certificate, client: ua.ApplicationDescription
    ) -> None:
        """asyncua's certificate validator (CreateSession): raises the status that says why."""
        try:
            await self._validator.validate(certificate, client)
        except ServiceError as error:
            reason = ua.StatusCode(error.code).name
            refused(certificate, client.ApplicationUri, reason)
            raise

    def trusts_channel(self, der: bytes | None) -> bool:
        """Whether the certificate the secure channel was opened with is trusted and valid."""
        if der is None:
            return False
        certificate = x509.load_der_x509_certificate(der)
        reason = self.distrust(certificate)
        if reason is not None:
            refused(certificate, None, reason)
        return reason is None

    def distrust(self, certificate: x509.Certificate) -> str | None:
        """Why a channel with ``certificate`` is not trusted (the status's name); ``None``:
        it is."""
        now = datetime.now(UTC)
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            return "BadCertificateTimeInvalid"
        if not self._store.is_trusted(certificate):
            return "BadCertificateUntrusted"
        if self._store.is_revoked(certificate):
            return "BadCertificateRevoked"
        return None


def drop_distrusted(server: Server, trust: ClientTrust) -> None:
    """Close the connections whose secure channel was opened with a certificate ``trust`` no
    longer trusts (removed from the list, revoked, expired), sessions and subscriptions with
    them. Called after the list changed: removing a certificate cuts its client off, it does
    not only keep it from coming back.

    asyncua has no public way to list a server's connections: this reads its binary server's
    ``clients`` (the test of the trust reload fails if a newer asyncua changes them).
    """
    connections = getattr(server.bserver, "clients", None)
    if connections is None:
        log.warning("OPC UA: this asyncua does not list its connections: the open ones stay")
        return
    for connection in list(connections):
        der = _channel_certificate(connection)
        if der is None:  # no certificate: no session can be activated on it anyway
            continue
        certificate = x509.load_der_x509_certificate(der)
        reason = trust.distrust(certificate)
        if reason is None:
            continue
        log.warning(
            "OPC UA: connection from %s closed: certificate CN=%s: %s",
            _peer(connection),
            common_name(certificate),
            reason,
        )
        connection.transport.close()


def _channel_certificate(connection: Any) -> bytes | None:
    processor = getattr(connection, "processor", None)
    secure_connection = getattr(processor, "_connection", None)
    policy = getattr(secure_connection, "security_policy", None)
    return getattr(policy, "peer_certificate", None)


def _peer(connection: Any) -> str:
    peer = getattr(connection, "peer_name", None)
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "a client"


def refused(certificate: x509.Certificate, uri: str | None, reason: str) -> None:
    client = f"client {uri!r}" if uri else "a client"
    log.warning(
        "OPC UA: %s refused: certificate CN=%s: %s", client, common_name(certificate), reason
    )


def common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else certificate.subject.rfc4514_string()


Fingerprint = tuple[tuple[str, int, int], ...]


def _fingerprint(trusted: Path, revocation_lists: Path | None) -> Fingerprint:
    """Name, size and modification time of every file in the directories."""
    return tuple(
        entry
        for directory in (trusted, revocation_lists)
        if directory is not None and directory.is_dir()
        for entry in _files(directory)
    )


def _files(directory: Path) -> list[tuple[str, int, int]]:
    files = []
    for path in sorted(directory.iterdir()):
        try:
            status = path.stat()
        except FileNotFoundError:  # removed meanwhile: the next look sees the change
            continue
        if path.is_file():
            files.append((str(path), status.st_size, status.st_mtime_ns))
    return files


async def _read(trusted: Path, revocation_lists: Path | None) -> TrustStore:
    """The trust store of the directories (``GatewayError``: they trust nobody, or hold a file
    that is not a certificate or CRL)."""
    await anyio.to_thread.run_sync(_check_directories, trusted, revocation_lists)
    store = TrustStore([trusted], [] if revocation_lists is None else [revocation_lists])
    try:
        await store.load()
    except (OSError, ValueError) as error:
        raise GatewayError(
            f"opcua.trusted_clients / revocation_lists: a file is not a certificate or CRL "
            f"(DER or PEM; keep private keys elsewhere): {error}"
        ) from None
    return store


def _check_directories(trusted: Path, revocation_lists: Path | None) -> None:
    for setting, directory in (
        ("trusted_clients", trusted),
        ("revocation_lists", revocation_lists),
    ):
        if directory is not None and not directory.is_dir():
            raise GatewayError(f"opcua.{setting}: {directory} is not a directory")
    if not any(path.suffix.lower() in (".der", ".pem") for path in trusted.iterdir()):
        raise GatewayError(f"opcua.trusted_clients: no certificate (.der, .pem) in {trusted}")


class PasswordUsers:
    """asyncua's user manager: one user, its password compared in constant time; with
    ``trust``, on a secure channel opened with a trusted client certificate only; a channel
    whose certificate failed a login is refused for a pause (``failures``)."""

    def __init__(
        self,
        username: str,
        password: str,
        trust: ClientTrust | None = None,
        failures: FailedLogins | None = None,
    ) -> None:
        self._username = username.encode()
        self._password = password.encode()
        self._trust = trust
        self.failures = failures if failures is not None else FailedLogins(pause=0)

    def get_user(
        self,
        iserver: InternalServer,
        username: str | None = None,
        password: str | None = None,
        certificate: Any = None,
    ) -> User | None:
        if username is None or password is None:
            log.warning("OPC UA: a client without user name and password was refused")
            return None
        if self.failures.barred(certificate):
            log.debug("OPC UA: login refused unchecked (this certificate failed a login lately)")
            return None
        name_ok = hmac.compare_digest(username.encode(), self._username)
        password_ok = hmac.compare_digest(password.encode(), self._password)
        if not (name_ok and password_ok):
            self.failures.failed(certificate)
            log.warning(
                "OPC UA: login refused for user %r (wrong user name or password); its client "
                "certificate is refused for %.1f s",
                username,
                self.failures.pause,
            )
            return None
        if self._trust is not None and not self._trust.trusts_channel(certificate):
            return None  # logged by ``trusts_channel``
        return User(role=UserRole.User, name=username)


async def client_trust(settings: OpcUaSettings) -> ClientTrust | None:
    """The trust list ``settings`` configure (``None``: any client certificate is accepted)."""
    if settings.trusted_clients is None:
        return None
    return await ClientTrust.load(settings.trusted_clients, settings.revocation_lists)


async def secure(
    server: Server,
    settings: OpcUaSettings,
    data_dir: Path,
    app_uri: str,
    trust: ClientTrust | None,
) -> None:
    """Apply the security settings to ``server`` (initialised, not started)."""
    server.set_security_policy(POLICIES[settings.security_mode])
    server.set_identity_tokens([ua.UserNameIdentityToken])
    if trust is not None:
        server.set_certificate_validator(trust.check_session)
    certificate, private_key = settings.certificate, settings.private_key
    if certificate is None or private_key is None:
        certificate, private_key = await _self_signed(data_dir / "opcua", app_uri)
    await server.load_certificate(certificate)
    await server.load_private_key(private_key)


async def _self_signed(directory: Path, app_uri: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``app_uri``, made once and kept (clients trust it once)."""
    directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  (start-up, once)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", app_uri.rsplit(":", 1)[-1]) or "server"
    certificate, key = directory / f"{name}-cert.der", directory / f"{name}-key.pem"
    await setup_self_signed_certificate(
        key,
        certificate,
        app_uri,
        socket.gethostname(),
        [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
        {"commonName": f"station-gateway {name}", "organizationName": "station-gateway"},
    )
    return certificate, key
