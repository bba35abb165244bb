"""Fixtures for the MessagePack-RPC tests: TLS certificates made with the openssl CLI."""

from __future__ import annotations

import shutil

import pytest

from gateway_msgpack_rpc.testing import Certificates, make_certificates


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make test certificates")
    return make_certificates(tmp_path_factory.mktemp("rpc-tls"))
