"""The pause after a failed OPC UA login: per client certificate, with an injected clock."""

from __future__ import annotations

from typing import Any

from gateway_opcua.logins import FailedLogins
from gateway_opcua.security import PasswordUsers

MES, GUESSER = b"mes certificate", b"guesser certificate"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def users(clock: Clock, pause: float = 2.0, capacity: int = 4096) -> PasswordUsers:
    failures = FailedLogins(pause, capacity=capacity, clock=clock)
    return PasswordUsers("mes", "right", failures=failures)


def login(manager: PasswordUsers, password: str, certificate: bytes | None) -> Any:
    return manager.get_user(None, username="mes", password=password, certificate=certificate)


def test_a_failed_login_bars_its_certificate_for_the_pause() -> None:
    clock = Clock()
    manager = users(clock)
    assert login(manager, "guess", GUESSER) is None
    clock.now += 1.9
    assert login(manager, "right", GUESSER) is None  # unchecked: still barred
    assert manager.failures.refused_unchecked == 1
    clock.now += 0.1
    assert login(manager, "right", GUESSER) is not None


def test_the_mes_is_never_locked_out_by_guesses_on_its_user_name() -> None:
    clock = Clock()
    manager = users(clock)
    for _ in range(100):
        assert login(manager, "guess", GUESSER) is None
        clock.now += 2.0
    assert login(manager, "right", MES) is not None


def test_a_barred_certificate_stays_barred_while_it_keeps_guessing() -> None:
    clock = Clock()
    manager = users(clock)
    assert login(manager, "guess", GUESSER) is None
    clock.now += 1.0
    assert login(manager, "guess", GUESSER) is None  # unchecked: the bar is not renewed
    clock.now += 1.0
    assert login(manager, "right", GUESSER) is not None


def test_channels_without_a_certificate_share_one_bar() -> None:
    clock = Clock()
    manager = users(clock)
    assert login(manager, "guess", None) is None
    assert login(manager, "right", None) is None
    assert login(manager, "right", b"") is None


def test_no_pause_when_it_is_zero() -> None:
    manager = users(Clock(), pause=0)
    assert login(manager, "guess", GUESSER) is None
    assert login(manager, "right", GUESSER) is not None


def test_the_bars_kept_are_bounded() -> None:
    clock = Clock()
    failures = FailedLogins(2.0, capacity=3, clock=clock)
    for index in range(10):
        failures.failed(f"certificate {index}".encode())
    assert not failures.barred(b"certificate 0")  # pushed out by newer ones
    assert failures.barred(b"certificate 9")
    clock.now += 2.0
    failures.failed(b"one more")
    assert failures.barred(b"one more")
    assert not failures.barred(b"certificate 9")
