"""The ``[opcua]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from gateway.settings import Secret, setting
from gateway.store import check_scope


class SecurityMode(StrEnum):
    """The lowest message security the server accepts (higher modes are always offered)."""

    NONE = "None"
    SIGN = "Sign"
    SIGN_AND_ENCRYPT = "SignAndEncrypt"


DEFAULT_PORT = 4840


@dataclass(frozen=True)
class OpcUaSettings:
    enabled: bool = setting(
        False, "Serve OPC 40001-3 job management over OPC UA (needs station-gateway[opcua])"
    )
    endpoint: str = setting(
        f"opc.tcp://0.0.0.0:{DEFAULT_PORT}", "Endpoint the server listens on (opc.tcp://host:port)"
    )
    security: str = setting(
        SecurityMode.SIGN_AND_ENCRYPT.value,
        "Lowest message security accepted with Basic256Sha256: SignAndEncrypt, Sign (and "
        "SignAndEncrypt), or None (every mode: only for a closed lab network)",
        choices=tuple(mode.value for mode in SecurityMode),
    )
    username: str = setting("", "User name clients log in with (required)")
    password: Secret | None = setting(None, "Password clients log in with (required)", secret=True)
    certificate: Path | None = setting(
        None,
        "Server certificate (DER or PEM); empty: a self-signed one is made once and kept in "
        "<gateway.data_dir>/opcua/",
    )
    private_key: Path | None = setting(None, "Private key of the server certificate (PEM)")
    trusted_clients: Path | None = setting(
        None,
        "Directory of the trusted client application certificates, or of the CAs that issued "
        "them (DER or PEM, read again when a file changes); set: only clients with such a "
        "certificate, valid now and made out for their ApplicationUri, open a session. Empty: "
        "any client certificate (the password authenticates)",
    )
    revocation_lists: Path | None = setting(
        None, "Directory of certificate revocation lists (DER or PEM) for trusted_clients"
    )
    application_uri: str = setting(
        "",
        "ApplicationUri of the server (must match the certificate's); "
        "empty: urn:station-gateway:<instance_id>",
    )
    trust_poll_seconds: float = setting(
        5.0,
        "How often trusted_clients and revocation_lists are looked at for changed files (a "
        "change applies at once: the connections of clients no longer trusted are closed)",
        minimum=0.05,
    )
    configuration_poll_seconds: float = setting(
        2.0,
        "How often each scope's configuration is read for JobOrderControl's variables (Work "
        "Masters, allowed IDs, MaxDownloadableJobOrders)",
        minimum=0.05,
    )
    scopes: list[str] = setting(
        [], "Scopes served: each is a MachineryItem under Machines, its BrowseName the scope id"
    )
    max_argument_bytes: int = setting(
        1_048_576,
        "Largest method call arguments taken (their JSON form), as mqtt.max_payload_bytes for "
        "MQTT: a larger call is refused with BadRequestTooLarge",
        minimum=1024,
    )
    max_connections: int = setting(
        64,
        "Client connections at once (more are closed at once); lowered to stay below the "
        "open-file limit with room for the gateway's own connections",
        minimum=1,
    )
    failed_login_pause_seconds: float = setting(
        2.0,
        "After a refused login, logins on a channel with the same client certificate are "
        "refused unchecked for this long (guessing then costs a new certificate per try; "
        "never per user name, so nobody can lock the MES out); 0: no pause",
        minimum=0,
    )
    max_message_bytes: int = setting(
        4_194_304,
        "Largest OPC UA message a client may send or receive (negotiated at connect; a larger "
        "one is refused before it is held in memory)",
        minimum=65_536,
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        self.host_and_port()
        for scope in self.scopes:
            try:
                check_scope(scope)
            except ValueError as error:
                raise ValueError(f"scopes: {error}") from None
        if (self.certificate is None) != (self.private_key is None):
            raise ValueError("certificate and private_key go together: set both or neither")
        if self.revocation_lists is not None and self.trusted_clients is None:
            raise ValueError("revocation_lists: they apply to trusted_clients, which is not set")
        if self.trusted_clients is not None and self.security_mode is SecurityMode.NONE:
            raise ValueError(
                "trusted_clients needs security Sign or SignAndEncrypt: on the None endpoint "
                "a client shows no certificate"
            )
        if self.enabled:
            if not self.scopes:
                raise ValueError("scopes: name at least one scope to serve")
            if not self.username or self.password is None or not self.password.reveal():
                raise ValueError("username and password are required: clients must log in")

    @property
    def security_mode(self) -> SecurityMode:
        return SecurityMode(self.security)

    def host_and_port(self) -> tuple[str, int]:
        parts = urlsplit(self.endpoint)
        if parts.scheme != "opc.tcp" or not parts.hostname:
            raise ValueError(f"endpoint must look like opc.tcp://host:port, got {self.endpoint!r}")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"endpoint has a bad port: {self.endpoint!r}") from None
        return parts.hostname, DEFAULT_PORT if port is None else port
