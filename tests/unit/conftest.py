"""Unit tests need no network: every test runs with name look-ups and inet sockets refused at
once (a test that reaches for the network fails here, on every machine, not only where
``/etc/hosts`` or the loopback happen to differ). Sockets of other families (a socketpair,
AF_UNIX, AF_NETLINK) stay allowed: they never leave the machine.

Nor does a test leave exit hooks behind: a session a test configures registers its end with
``atexit``; run at pytest's own exit it would look at a stale clock, print a last line, and
act on the test's made-up job."""

from __future__ import annotations

import atexit
import contextlib
import socket
from typing import Any, Callable, Iterator

import pytest

from torchrun_jsc.runtime import agent

#: The families a unit test may not use.
_INET = (socket.AF_INET, socket.AF_INET6)


class NetworkInUnitTest(AssertionError):
    """A unit test reached for the network."""


def _refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NetworkInUnitTest(f"unit tests need no network: {what}{args!r}")

    return refused


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Name look-ups and inet connects, binds and sends fail at once."""
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        monkeypatch.setattr(socket, name, _refuse(f"socket.{name}"))
    monkeypatch.setattr(socket, "create_connection", _refuse("socket.create_connection"))
    for method in ("connect", "connect_ex", "bind", "sendto"):
        original = getattr(socket.socket, method)

        def guarded(self: socket.socket, *args: Any, _m: str = method, _o: Any = original) -> Any:
            if self.family in _INET:
                raise NetworkInUnitTest(f"unit tests need no network: socket.{_m}{args!r}")
            return _o(self, *args)

        monkeypatch.setattr(socket.socket, method, guarded)
    yield


@contextlib.contextmanager
def exit_hooks_undone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Exit hooks registered inside are unregistered when it ends."""
    registered: list[Callable[..., Any]] = []
    original = atexit.register

    def register(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        registered.append(function)
        return original(function, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(atexit, "register", register)
        try:
            yield
        finally:
            for function in registered:
                atexit.unregister(function)


@pytest.fixture(autouse=True)
def no_exit_hooks_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test's exit hooks, and the runtime its patches shared (the stop signals noted or
    held, the workers), do not outlive it."""
    with exit_hooks_undone(monkeypatch):
        yield
    agent.forget()
