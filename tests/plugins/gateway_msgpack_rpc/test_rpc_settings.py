"""The ``[msgpack_rpc]`` section: defaults, and start-up errors that name the key at fault."""

from __future__ import annotations

import pytest

from gateway.errors import SettingsError
from gateway_msgpack_rpc.settings import RemoteEquipment
from gateway_msgpack_rpc.testing import Certificates, rpc_binding, rpc_gateway


def test_by_default_no_server_and_no_equipment_connections() -> None:
    gateway = rpc_gateway(settings={"port": "0"})
    binding = rpc_binding(gateway)
    assert binding.settings.port == 0
    assert binding.remote == {}
    assert binding.settings.max_request_bytes == 1_048_576


def test_equipment_servers_are_listed_as_id_equals_address() -> None:
    listed = "press=10.0.0.5:18800, camera=tls://cam.local:18801, probe=[::1]:9"
    gateway = rpc_gateway(settings={"equipment": listed, "tls_verify": "false"})
    assert list(rpc_binding(gateway).remote.values()) == [
        RemoteEquipment("press", "10.0.0.5", 18800),
        RemoteEquipment("camera", "cam.local", 18801, tls=True),
        RemoteEquipment("probe", "::1", 9),
    ]


@pytest.mark.parametrize(
    ("settings", "key", "words"),
    [
        ({"equipment": "press"}, "msgpack_rpc.equipment", "id=host:port"),
        ({"equipment": "press=host:99999"}, "msgpack_rpc.equipment", "id=host:port"),
        ({"equipment": "a/b=host:1"}, "msgpack_rpc.equipment", "'/'"),
        ({"equipment": "p=h:1,p=h:2"}, "msgpack_rpc.equipment", "listed twice"),
        ({"known_equipment": "cell#1"}, "msgpack_rpc.known_equipment", "'#'"),
        ({"tls_cert_file": "/nonexistent.pem"}, "msgpack_rpc.tls_cert_file", "cannot be"),
        ({"max_request_bytes": "10"}, "msgpack_rpc.max_request_bytes", ">= 1024"),
    ],
)
def test_bad_settings_stop_start_up_naming_the_key(
    settings: dict[str, str], key: str, words: str
) -> None:
    with pytest.raises(SettingsError) as error:
        rpc_gateway(settings=settings)
    assert error.value.element == key
    assert words in error.value.reason


def test_client_authentication_needs_a_ca(certificates: Certificates) -> None:
    settings = {
        "tls_client_auth": "true",
        "tls_cert_file": str(certificates.gateway_cert),
        "tls_key_file": str(certificates.gateway_key),
    }
    with pytest.raises(SettingsError) as error:
        rpc_gateway(settings=settings)
    assert error.value.element == "msgpack_rpc.tls_client_auth"
