"""The unit tests' network guard (tests/unit/conftest.py) refuses what it says it refuses."""

from __future__ import annotations

import socket

import pytest

from .conftest import NetworkInUnitTest


@pytest.mark.parametrize(
    "call",
    [
        lambda: socket.getaddrinfo("localhost", 80),
        lambda: socket.gethostbyname("localhost"),
        lambda: socket.create_connection(("127.0.0.1", 9)),
    ],
    ids=["getaddrinfo", "gethostbyname", "create_connection"],
)
def test_name_lookups_and_connections_fail_at_once(call: object) -> None:
    with pytest.raises(NetworkInUnitTest, match="unit tests need no network"):
        call()  # type: ignore[operator]


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_inet_binds_and_connects_fail_at_once(family: int) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        for method, address in (("bind", ("", 0)), ("connect", ("127.0.0.1", 9))):
            with pytest.raises(NetworkInUnitTest):
                getattr(sock, method)(address)


def test_sockets_that_stay_on_the_machine_still_work() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"ok")
        assert right.recv(2) == b"ok"
