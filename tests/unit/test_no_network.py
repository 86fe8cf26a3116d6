"""The unit tests' guards (tests/unit/conftest.py) refuse what they say they refuse."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

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


_HOOK = """
import atexit, pytest
from tests.unit.conftest import exit_hooks_undone
def hook():
    print("hook ran")
if {undone}:
    with exit_hooks_undone(pytest.MonkeyPatch()):
        atexit.register(hook)
else:
    atexit.register(hook)
"""


@pytest.mark.parametrize("undone", [True, False])
def test_exit_hooks_registered_in_a_test_do_not_run_at_exit(undone: bool) -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    ran = subprocess.run(
        [sys.executable, "-c", _HOOK.format(undone=undone)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert ("hook ran" in ran.stdout) is not undone
