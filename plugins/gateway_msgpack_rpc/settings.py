"""The ``[msgpack_rpc]`` settings section, and the checks that turn it into addresses and TLS."""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.errors import SettingsError
from gateway.settings import PORT_MAXIMUM, setting

SECTION = "msgpack_rpc"


@dataclass(frozen=True)
class MsgpackRpcSettings:
    host: str = setting("127.0.0.1", "Address the RPC server listens on ('0.0.0.0': all)")
    port: int = setting(
        0,
        "Port of the RPC server that equipment connects to; 0: no server",
        minimum=0,
        maximum=PORT_MAXIMUM,
    )
    equipment: list[str] = setting(
        [],
        "Equipment that is itself an RPC server, as 'id=host:port' (or 'id=tls://host:port'): "
        "the gateway connects to it and calls its 'command' method",
    )
    known_equipment: list[str] = setting(
        [],
        "Ids of equipment that connects to the server: commands for it fail as 'offline' "
        "while it is not connected, also before it first connected",
    )
    topic_prefix: str = setting(
        "rpc", "Events published over RPC are dispatched on '<prefix>/<equipment id>/publish'"
    )
    max_request_bytes: int = setting(
        1_048_576, "Larger frames are answered with a 'request-too-large' error", minimum=1024
    )
    max_skip_bytes: int = setting(
        16_777_216,
        "An oversize frame is read and discarded up to this size, keeping the connection; "
        "a longer one closes it",
        minimum=1024,
    )
    max_concurrent_requests: int = setting(
        16, "Requests handled at once per connection; further ones wait unread", minimum=1
    )
    heartbeat_timeout_seconds: float = setting(
        30.0,
        "Equipment connected to the server that sends nothing for this long is offline "
        "(its connection is closed); 0: never",
        minimum=0,
    )
    hello_timeout_seconds: float = setting(
        10.0,
        "A connection to the server that has not named its equipment (hello) this long after "
        "it opened is closed",
        minimum=0.1,
    )
    max_connections: int = setting(
        256,
        "Connections to the server at once; one more is closed at once. Lowered (with a "
        "warning) to stay below the open-file limit with room for the gateway's own "
        "connections",
        minimum=1,
    )
    send_timeout_seconds: float = setting(
        5.0,
        "A peer that takes no frame for this long is given up (connection closed)",
        minimum=0.01,
    )
    call_timeout_seconds: float = setting(
        600.0, "Longest wait for the result of a 'command' call to equipment", minimum=0.01
    )
    connect_timeout_seconds: float = setting(
        5.0, "Connecting to equipment; also the TLS handshake of equipment connecting", minimum=0.01
    )
    reconnect_min_seconds: float = setting(0.2, "First reconnect delay", minimum=0)
    reconnect_max_seconds: float = setting(30.0, "Longest reconnect delay (exponential backoff)")
    tls_cert_file: str = setting(
        "",
        "Certificate (PEM) of the gateway: set, the server speaks TLS only; also presented "
        "to equipment servers that ask for a client certificate",
    )
    tls_key_file: str = setting("", "Key of tls_cert_file (empty: in the certificate file)")
    tls_ca_file: str = setting(
        "", "CA bundle that verifies equipment certificates (empty: the system's CAs)"
    )
    tls_client_auth: bool = setting(
        False, "The server requires a client certificate signed by tls_ca_file"
    )
    tls_verify: bool = setting(True, "Verify equipment servers' certificates and host names")
    device_auth: str = setting(
        "none",
        "What proves the equipment id a device names in hello: 'none' (nothing: trusted "
        "networks only), 'token' (hello(equipment_id, token), checked against "
        "device_tokens_file), 'certificate' (the TLS client certificate's common name or a DNS "
        "name is the id; needs tls_client_auth)",
        choices=("none", "token", "certificate"),
    )
    allow_unauthenticated_devices: bool = setting(
        False,
        "Let the server listen on an address other than loopback with device_auth 'none' "
        "(any device may then name any equipment id: a network you trust only)",
    )
    device_tokens_file: str = setting(
        "",
        "With device_auth 'token': lines '<equipment id> sha256:<hex SHA-256 of its token>'",
    )

    def __post_init__(self) -> None:
        # ValueError here becomes a SettingsError naming the section (see gateway.settings).
        if (
            self.port
            and self.device_auth == "none"
            and not is_loopback(self.host)
            and not self.allow_unauthenticated_devices
        ):
            raise ValueError(
                f"device_auth: the server listens on {self.host} and believes any device's "
                "equipment id (device_auth = none): anyone reaching the port could take the "
                "commands of any equipment. Set device_auth = 'token' with device_tokens_file "
                "(docs/drivers.md shows how to make a token), or 'certificate' with "
                "tls_client_auth; on a network you trust, set allow_unauthenticated_devices = "
                "true"
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class RemoteEquipment:
    """One equipment RPC server the gateway connects to (``equipment`` setting)."""

    equipment_id: str
    host: str
    port: int
    tls: bool = False


_ENTRY = re.compile(
    r"(?P<id>[^=\s]+)="
    r"(?:(?P<scheme>tcp|tls)://)?"
    r"(?P<host>[^\s:/\[\]]+|\[[0-9A-Fa-f:.]+\])"  # a name, IPv4, or [IPv6]
    r":(?P<port>\d{1,5})"
)


def remote_equipment(settings: MsgpackRpcSettings) -> list[RemoteEquipment]:
    """The ``equipment`` entries, checked: each 'id=host:port' with a valid, unique id."""
    entries: list[RemoteEquipment] = []
    for entry in settings.equipment:
        match = _ENTRY.fullmatch(entry.strip())
        if match is None or not 0 < int(match["port"]) < 65536:
            raise SettingsError(
                f"{SECTION}.equipment",
                f"expected 'id=host:port' or 'id=tls://host:port', got {entry!r}",
            )
        problem = equipment_id_problem(match["id"])
        if problem:
            raise SettingsError(f"{SECTION}.equipment", f"{entry!r}: {problem}")
        if any(known.equipment_id == match["id"] for known in entries):
            raise SettingsError(f"{SECTION}.equipment", f"{match['id']!r} is listed twice")
        host = match["host"].strip("[]")
        tls = match["scheme"] == "tls"
        entries.append(RemoteEquipment(match["id"], host, int(match["port"]), tls))
    return entries


def equipment_id_problem(equipment_id: object) -> str | None:
    """Why ``equipment_id`` cannot name equipment, or ``None`` when it can.

    Ids appear in topics (``<prefix>/<id>/publish``), so MQTT's topic characters are excluded.
    """
    if not isinstance(equipment_id, str):
        return f"an equipment id is a string, got {type(equipment_id).__name__}"
    if not 0 < len(equipment_id) <= 128:
        return "an equipment id has 1 to 128 characters"
    if not equipment_id.isprintable() or any(char in "/+#= " for char in equipment_id):
        return f"equipment id {equipment_id!r} may not contain spaces, '/', '+', '#' or '='"
    return None


def server_tls_context(settings: MsgpackRpcSettings) -> ssl.SSLContext | None:
    """The server's TLS context, or ``None`` for plain TCP (no certificate configured)."""
    if not settings.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(context, settings)
    if settings.tls_client_auth:
        if not settings.tls_ca_file:
            raise SettingsError(f"{SECTION}.tls_client_auth", "needs tls_ca_file to verify clients")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_tls_context(settings: MsgpackRpcSettings) -> ssl.SSLContext:
    """The TLS context for connecting to 'tls://' equipment servers."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    _load(context, settings)
    if not settings.tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load(context: ssl.SSLContext, settings: MsgpackRpcSettings) -> None:
    """Load the CA bundle and our certificate; a missing or bad file names its setting."""
    if settings.tls_ca_file:
        with _reading("tls_ca_file"):
            context.load_verify_locations(cafile=settings.tls_ca_file)
    if settings.tls_cert_file:
        with _reading("tls_cert_file"):
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file or None)


@contextmanager
def _reading(key: str) -> Iterator[None]:
    try:
        yield
    except (OSError, ssl.SSLError) as error:
        raise SettingsError(f"{SECTION}.{key}", f"cannot be loaded: {error}") from None
