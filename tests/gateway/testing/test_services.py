"""The test servers' ports: free, and out of the way of the machine's outgoing connections."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gateway.testing.services import free_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def test_a_free_port_is_below_the_kernels_ephemeral_range_so_no_connection_takes_it() -> None:
    first_ephemeral = int(RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(port < first_ephemeral for port in ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))  # free when handed out


def test_a_port_something_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        other = free_port()
        draws = iter([busy, busy, other])
        monkeypatch.setattr("gateway.testing.services.secrets.choice", lambda _: next(draws))
        assert free_port() == other
