"""Who a connecting device is: the credential that proves its equipment id.

``[msgpack_rpc] device_auth`` says what the server believes:

- ``none``: the id named in ``hello`` (for trusted networks and the demo only);
- ``token``: ``hello(equipment_id, token)``, the token's SHA-256 listed for that id in
  ``device_tokens_file`` (lines ``<equipment id> sha256:<64 hex digits>``; ``#`` comments). The
  file holds digests only, so it is no secret itself; the tokens are random strings only the
  devices know (``docs/drivers.md`` shows how to make one and its line);
- ``certificate``: the TLS client certificate (``tls_client_auth``, verified against
  ``tls_ca_file``) names the equipment: its common name or one of its DNS names is the id.

A connection that fails is answered ``not-authorized`` and closed. Equipment the gateway
connects to (``equipment`` entries) is identified by its configured address instead, and by its
server certificate with ``tls://``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from anyio.abc import AnyByteStream
from anyio.streams.tls import TLSAttribute

from gateway.errors import SettingsError
from gateway.peers import LogOnce
from gateway_msgpack_rpc.protocol import NOT_AUTHORIZED, RpcError
from gateway_msgpack_rpc.settings import SECTION, MsgpackRpcSettings, equipment_id_problem

log = logging.getLogger(__name__)


class DeviceAuth(StrEnum):
    """What proves a connecting device's equipment id (``[msgpack_rpc] device_auth``)."""

    NONE = "none"
    TOKEN = "token"
    CERTIFICATE = "certificate"


_LINE = re.compile(r"(?P<id>\S+)\s+sha256:(?P<digest>[0-9a-fA-F]{64})")


def token_digest(token: str) -> str:
    """The line value of a token in ``device_tokens_file``: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def read_tokens(path: str) -> dict[str, bytes]:
    """The token digests of ``device_tokens_file`` by equipment id; ``SettingsError`` naming the
    line that is wrong."""
    key = f"{SECTION}.device_tokens_file"
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise SettingsError(key, f"cannot be read: {error}") from None
    digests: dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise SettingsError(
                key, f"{path} line {number}: expected '<equipment id> sha256:<64 hex digits>'"
            )
        problem = equipment_id_problem(match["id"])
        if problem is not None:
            raise SettingsError(key, f"{path} line {number}: {problem}")
        if match["id"] in digests:
            raise SettingsError(key, f"{path} line {number}: {match['id']!r} is listed twice")
        digests[match["id"]] = bytes.fromhex(match["digest"])
    return digests


def certificate_names(stream: AnyByteStream) -> frozenset[str]:
    """The common name and DNS names of the peer's verified TLS certificate (none: empty)."""
    certificate: Any = stream.extra(TLSAttribute.peer_certificate, None)
    if not certificate:
        return frozenset()
    names = {
        value
        for rdn in certificate.get("subject", ())
        for name, value in rdn
        if name == "commonName"
    }
    names |= {value for kind, value in certificate.get("subjectAltName", ()) if kind == "DNS"}
    return frozenset(names)


class DeviceAuthenticator:
    """Checks the credential of a connection that names its equipment (``hello``)."""

    def __init__(self, mode: DeviceAuth, tokens: Mapping[str, bytes] | None = None) -> None:
        self.mode = mode
        self._tokens = dict(tokens or {})
        self._refusals = LogOnce(log)  # one line a minute per address, however many tries

    @classmethod
    def from_settings(cls, settings: MsgpackRpcSettings) -> DeviceAuthenticator:
        mode = DeviceAuth(settings.device_auth)
        if mode is DeviceAuth.TOKEN:
            if not settings.device_tokens_file:
                raise SettingsError(
                    f"{SECTION}.device_tokens_file", "device_auth 'token' needs the tokens file"
                )
            return cls(mode, read_tokens(settings.device_tokens_file))
        if mode is DeviceAuth.CERTIFICATE and not (
            settings.tls_cert_file and settings.tls_client_auth
        ):
            raise SettingsError(
                f"{SECTION}.device_auth",
                "'certificate' needs TLS with client certificates (tls_cert_file, "
                "tls_client_auth = true, tls_ca_file)",
            )
        return cls(mode)

    def check(self, equipment_id: str, token: Any, names: frozenset[str], peer: str) -> None:
        """Nothing if the connection may be ``equipment_id``; ``RpcError(not-authorized)``
        otherwise (the log says why, the answer does not)."""
        why = self._refusal(equipment_id, token, names)
        if why is None:
            return
        self._refusals.report(
            peer.rpartition(":")[0] or peer,
            "MessagePack-RPC connection %s refused as %s: %s",
            peer,
            equipment_id,
            why,
        )
        raise RpcError(NOT_AUTHORIZED, f"not authorized as equipment {equipment_id!r}")

    def _refusal(self, equipment_id: str, token: Any, names: frozenset[str]) -> str | None:
        if self.mode is DeviceAuth.NONE:
            return None
        if self.mode is DeviceAuth.CERTIFICATE:
            if equipment_id in names:
                return None
            return f"the client certificate names {sorted(names) or 'nothing'}"
        expected = self._tokens.get(equipment_id)
        if not isinstance(token, str) or not token:
            return "no token"
        digest = hashlib.sha256(token.encode()).digest()
        if expected is None or not hmac.compare_digest(digest, expected):
            return "wrong token" if expected is not None else "no token is listed for it"
        return None
