"""Who may connect: Basic256Sha256 message security, the server certificate, user and password.

The server offers Basic256Sha256 with SignAndEncrypt, with Sign too when ``security = "Sign"``,
and without security only when ``security = "None"``. Every client logs in with the configured
user name and password; anonymous sessions are refused. Client application certificates are
accepted without a trust list (the password authenticates): with ``SignAndEncrypt`` the password
travels encrypted either way.
"""

from __future__ import annotations

import hmac
import logging
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncua import Server, ua
from asyncua.crypto.cert_gen import setup_self_signed_certificate
from asyncua.crypto.permission_rules import User, UserRole
from cryptography.x509.oid import ExtendedKeyUsageOID

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


class PasswordUsers:
    """asyncua's user manager: one user, its password compared in constant time."""

    def __init__(self, username: str, password: str) -> None:
        self._username = username.encode()
        self._password = password.encode()

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
        name_ok = hmac.compare_digest(username.encode(), self._username)
        password_ok = hmac.compare_digest(password.encode(), self._password)
        if not (name_ok and password_ok):
            log.warning("OPC UA: login refused for user %r (wrong user name or password)", username)
            return None
        return User(role=UserRole.User, name=username)


async def secure(server: Server, settings: OpcUaSettings, data_dir: Path, app_uri: str) -> None:
    """Apply the security settings to ``server`` (initialised, not started)."""
    server.set_security_policy(POLICIES[settings.security_mode])
    server.set_identity_tokens([ua.UserNameIdentityToken])
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
