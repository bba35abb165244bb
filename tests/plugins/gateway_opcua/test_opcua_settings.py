"""The ``[opcua]`` section: what start-up refuses, and the conversions the server relies on."""

from __future__ import annotations

import json

import pytest
from asyncua import ua

from gateway.app import load_gateway_settings
from gateway.errors import SettingsError
from gateway.plugins import build_plugin_manager
from gateway_opcua.convert import ConversionError, from_json, to_json, variant
from gateway_opcua.settings import OpcUaSettings, SecurityMode

ENABLED = {
    "GATEWAY_PLUGINS_ALLOW": "opcua",
    "GATEWAY_OPCUA_ENABLED": "true",
    "GATEWAY_OPCUA_USERNAME": "mes",
    "GATEWAY_OPCUA_PASSWORD": "pw",
    "GATEWAY_OPCUA_SCOPES": "cell1",
}


def opcua_settings(**environ: str) -> OpcUaSettings:
    plugins = build_plugin_manager(environ)
    return load_gateway_settings(plugins, None, environ).get(OpcUaSettings)


def test_an_enabled_server_needs_scopes_and_a_login() -> None:
    settings = opcua_settings(**ENABLED)
    assert settings.security_mode is SecurityMode.SIGN_AND_ENCRYPT
    assert settings.host_and_port() == ("0.0.0.0", 4840)
    with pytest.raises(SettingsError, match="scopes"):
        opcua_settings(**{**ENABLED, "GATEWAY_OPCUA_SCOPES": ""})
    with pytest.raises(SettingsError, match="password"):
        opcua_settings(**{**ENABLED, "GATEWAY_OPCUA_PASSWORD": ""})


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("ENDPOINT", "http://0.0.0.0:4840", "endpoint"),
        ("SECURITY", "Basic128", "security"),
        ("SCOPES", "cell{1}", "scopes"),
        ("CERTIFICATE", "/etc/cert.der", "private_key"),
    ],
)
def test_bad_values_stop_start_up_naming_the_key(key: str, value: str, named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        opcua_settings(**{**ENABLED, f"GATEWAY_OPCUA_{key}": value})


def test_a_trust_list_needs_message_security() -> None:
    trusting = {**ENABLED, "GATEWAY_OPCUA_TRUSTED_CLIENTS": "/etc/opcua/trusted"}
    assert opcua_settings(**trusting).trusted_clients is not None
    with pytest.raises(SettingsError, match="trusted_clients needs security"):
        opcua_settings(**{**trusting, "GATEWAY_OPCUA_SECURITY": "None"})
    with pytest.raises(SettingsError, match="revocation_lists"):
        opcua_settings(**{**ENABLED, "GATEWAY_OPCUA_REVOCATION_LISTS": "/etc/opcua/crl"})


def test_the_password_is_masked() -> None:
    plugins = build_plugin_manager(ENABLED)
    shown = load_gateway_settings(plugins, None, ENABLED).masked()
    assert "pw" not in json.dumps(shown, default=str)


def test_json_values_become_variants_and_back() -> None:
    assert variant(3).VariantType is ua.VariantType.Int64
    assert variant(2.5).VariantType is ua.VariantType.Double
    assert variant([1, 2]).VariantType is ua.VariantType.Int64
    structured = variant({"torque": 41.5, "ok": True})
    assert structured.VariantType is ua.VariantType.String  # OPC UA has no JSON object
    assert json.loads(structured.Value) == {"torque": 41.5, "ok": True}
    text = from_json({"Locale": "en", "Text": "hello"}, ua.LocalizedText)
    assert to_json(text) == {"Locale": "en", "Text": "hello"}
    element = from_json(
        {"ReferenceTypeId": "i=47", "TargetName": "Completed", "IsInverse": False},
        ua.RelativePathElement,
    )
    assert element.ReferenceTypeId == ua.NodeId(47)
    assert to_json(element)["TargetName"] == "Completed"


def test_a_bare_browse_name_is_in_the_namespace_the_caller_names() -> None:
    element = from_json({"TargetName": "Completed"}, ua.RelativePathElement, names=3)
    assert element.TargetName == ua.QualifiedName("Completed", 3)
    assert to_json(element, names=3)["TargetName"] == "Completed"
    assert to_json(element)["TargetName"] == "3:Completed"  # another namespace keeps its index
    explicit = from_json({"TargetName": "0:Completed"}, ua.RelativePathElement, names=3)
    assert explicit.TargetName == ua.QualifiedName("Completed", 0)


def test_a_value_of_the_wrong_kind_names_its_field() -> None:
    with pytest.raises(ConversionError, match=r"value\.Text"):
        from_json({"Text": 5}, ua.LocalizedText)
