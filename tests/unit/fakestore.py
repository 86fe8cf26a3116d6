"""One in-memory store for every unit test of the job watch: the operations of
:class:`torchrun_jsc.runtime.store.connection.JobStore` (what the protocol needs) on a dict,
with the two ways a real store goes wrong (an operation that hangs; one that fails) at the test's
command. Tests speak to it through :class:`torchrun_jsc.runtime.store.protocol.JobProtocol`, never
by key names, except where a test is about the encoding itself
(tests/unit/runtime/store/test_protocol.py).
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Sequence

from torchrun_jsc.runtime.store.protocol import JobProtocol


class FakeStore:
    """A rendezvous store in a dict (keys without the run's prefix, values as text)."""

    def __init__(self) -> None:
        self.values: Dict[str, str] = {}
        self.last_ok = time.monotonic()
        #: What every operation reports as the age of the one in flight (a hanging host).
        self.busy_for = 0.0
        #: Set: every operation raises (a host that refuses connections).
        self.refuse = False
        #: Cleared: every operation blocks until it is set again (a frozen host).
        self.running = threading.Event()
        self.running.set()
        self.calls: List[str] = []
        self._lock = threading.Lock()

    def _op(self, name: str) -> None:
        self.calls.append(name)
        self.running.wait()
        if self.refuse:
            raise RuntimeError("connection refused")

    def _done(self) -> None:
        self.last_ok = time.monotonic()

    def in_flight(self, now: Optional[float] = None) -> float:
        return self.busy_for

    def add(self, name: str, amount: int) -> int:
        self._op("add")
        with self._lock:
            value = int(self.values.get(name, "0")) + amount
            self.values[name] = str(value)
        self._done()
        return value

    def set(self, name: str, value: str) -> None:
        self._op("set")
        with self._lock:
            self.values[name] = value
        self._done()

    def first(self, name: str, value: str) -> str:
        self._op("first")
        with self._lock:
            found = self.values.setdefault(name, value)
        self._done()
        return found

    def peek(self, name: str) -> Optional[str]:
        self._op("peek")
        self._done()
        return self.values.get(name)

    def get_many(self, names: Sequence[str]) -> Dict[str, str]:
        self._op("get_many")
        missing = [n for n in names if n not in self.values]
        if missing:  # a real store would wait for them forever
            raise AssertionError(f"get of missing keys {missing}")
        self._done()
        return {n: self.values[n] for n in names}


def protocol() -> JobProtocol:
    """The protocol over a new fake store (``.store`` is the :class:`FakeStore`)."""
    return JobProtocol(FakeStore())
