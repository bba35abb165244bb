"""The ``[mqtt]`` settings section."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from gateway.errors import SettingsError
from gateway.settings import Secret, setting
from gateway.topics import GATEWAY_REPLY_PREFIX

URL_SCHEMES = ("mqtt", "mqtts", "memory")


@dataclass(frozen=True)
class MqttSettings:
    url: str = setting(
        "mqtt://localhost:1883",
        "Broker URL: mqtt://host:port, mqtts:// for TLS, or memory://<name> for the broker "
        "in this process (no broker installed)",
        schemes=URL_SCHEMES,
    )
    username: str = setting("", "User name (overrides one given in the URL)")
    password: Secret | None = setting(None, "Password", secret=True)
    client_id: str = setting(
        "",
        "MQTT client id; empty: 'gw-' + the instance id, with a tag made from the MQTT password "
        "that only the gateway's login can compute. Must be stable across restarts",
    )
    share_group: str = setting(
        "gateway", "Shared-subscription group: instances in one group split the commands"
    )
    session_expiry_seconds: int = setting(
        3600, "How long the broker keeps this instance's session (and queued commands)", minimum=0
    )
    adopt_gone_instances: bool = setting(
        True,
        "Take over the sessions of instances that died without leaving their share groups "
        "(needs the default client ids and a store)",
    )
    keepalive_seconds: int = setting(30, "MQTT keep-alive interval", minimum=5)
    reconnect_min_seconds: float = setting(0.2, "First reconnect delay", minimum=0)
    reconnect_max_seconds: float = setting(30.0, "Longest reconnect delay (exponential backoff)")
    unreachable_report_seconds: float = setting(
        60.0, "While the broker cannot be reached, say so this often (WARNING)", minimum=1
    )
    reply_topic_prefix: str = setting(
        GATEWAY_REPLY_PREFIX,
        "Replies to commands this instance sends arrive on <prefix>/<instance id>",
    )
    max_concurrent_handlers: int = setting(
        # 20, what mosquitto handed a lane at a time before the gateway asked for its budget:
        # at 200 jobs on a CPU-bound 2-core machine, 64 at once let steps pile up past their
        # timeouts somewhat more often (jobs aborted in 6 of 7 runs of step_path.py, against
        # 6 of 11 at 20), for no more steps per second.
        20,
        "Messages handled at once per lane (the MES's calls have one of their own): the "
        "broker is asked for no more unacknowledged messages (MQTT v5 Receive Maximum), and "
        "keeps the rest",
        minimum=1,
        maximum=65535,
    )
    max_payload_bytes: int = setting(
        1_048_576, "Larger incoming payloads are rejected with an error reply", minimum=1024
    )
    tls_ca_file: str = setting("", "CA bundle to verify the broker (TLS)")
    tls_cert_file: str = setting("", "Client certificate (TLS client authentication)")
    tls_key_file: str = setting("", "Client certificate key")
    tls_verify: bool = setting(True, "Verify the broker's certificate and host name")


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    tls: bool
    username: str | None
    password: str | None


def broker_address(settings: MqttSettings) -> BrokerAddress:
    """Host, port, TLS and credentials from the URL, with the explicit settings taking priority."""
    parts = urlsplit(settings.url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise SettingsError(
            "mqtt.url",
            "expected mqtt://host:port, mqtts://host:port or memory://<name>, "
            f"got scheme {parts.scheme!r}",
        )
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError:
        raise SettingsError("mqtt.url", "the port is not a number") from None
    username = settings.username or (unquote(parts.username) if parts.username else None)
    password = (
        settings.password.reveal()
        if settings.password is not None
        else (unquote(parts.password) if parts.password else None)
    )
    return BrokerAddress(
        parts.hostname, port, tls or bool(settings.tls_ca_file), username, password
    )


def session_client_id(settings: MqttSettings, instance_id: str, lane: str = "") -> str:
    """The client id of ``instance_id``'s session on ``lane`` (``""``: the main one).

    Mosquitto cannot bind a client id to a user: any login that knows a session's client id can
    connect with it and take the session over. The instance id is no secret (it names the
    instance's reply topic), so with a password the client id carries a tag made from it,
    ``gw-<instance id>-<tag>``: every gateway instance (same login) computes the others' ids
    to adopt their sessions, and no other login can. ``mqtt.client_id`` replaces all of this.
    """
    suffix = f"-{lane}" if lane else ""
    if settings.client_id:
        return settings.client_id + suffix
    password = _password(settings)
    if not password:
        return f"gw-{instance_id}{suffix}"
    tag = hmac.new(password.encode(), f"mqtt session {instance_id}".encode(), hashlib.sha256)
    return f"gw-{instance_id}-{tag.hexdigest()[:16]}{suffix}"


def _password(settings: MqttSettings) -> str | None:
    if settings.password is not None:
        return settings.password.reveal()
    password = urlsplit(settings.url).password
    return unquote(password) if password else None
