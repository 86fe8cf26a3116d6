"""torchrun_jsc's own connection to the rendezvous store (the keys it uses there, and their
values, are :mod:`torchrun_jsc.runtime.store.protocol`'s).

The agent's own TCPStore client is torch's; sharing it would let a blocked torchrun_jsc
operation block torch (the client serialises operations) and the other way round. So this is a
second client to the same store (the rendezvous endpoint), made on first use, under the key
prefix ``torchrun_jsc/<run id>/``. Every operation notes when it started, so a watchdog in
another thread can see one that hangs: a TCPStore operation on a frozen server blocks forever
(torch 2.1+), and nothing can interrupt it.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence


class JobStore:
    """One client, its key prefix and the start time of the operation in flight."""

    def __init__(self, host: str, port: int, run_id: str, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.prefix = f"torchrun_jsc/{run_id}/"
        self._store: Any = None
        self._lock = threading.Lock()
        self._since: Optional[float] = None
        #: monotonic time of the last operation that completed.
        self.last_ok = time.monotonic()

    def _client(self) -> Any:
        if self._store is None:
            import torch.distributed as dist

            tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
            self._store = tcp_store(
                host_name=self.host,
                port=self.port,
                is_master=False,
                timeout=timedelta(seconds=self.timeout),
            )
        return self._store

    def in_flight(self, now: Optional[float] = None) -> float:
        """Seconds the current operation has been running (0 when none)."""
        since = self._since
        return 0.0 if since is None else (now or time.monotonic()) - since

    def _run(self, name: str, *args: Any) -> Any:
        with self._lock:
            self._since = time.monotonic()
            try:
                result = getattr(self._client(), name)(*args)
            finally:
                self._since = None
            self.last_ok = time.monotonic()
            return result

    def key(self, name: str) -> str:
        """The full key of ``name``."""
        return self.prefix + name

    def add(self, name: str, amount: int) -> int:
        """``add`` (returns the new value)."""
        return int(self._run("add", self.key(name), amount))

    def set(self, name: str, value: str) -> None:
        """``set``."""
        self._run("set", self.key(name), value)

    def first(self, name: str, value: str) -> str:
        """Set ``name`` to ``value`` unless it is set; returns the value it holds now."""
        found = self._run("compare_set", self.key(name), "", value)
        return bytes(found).decode()

    def peek(self, name: str) -> Optional[str]:
        """The value of ``name``, or None when it is not set (a ``compare_set`` that never
        writes; ``get`` would wait for the key)."""
        marker = "\x00torchrun_jsc-absent"
        found = bytes(self._run("compare_set", self.key(name), marker, marker)).decode()
        return None if found == marker else found

    def get_many(self, names: Sequence[str]) -> Dict[str, str]:
        """The values of ``names``, which must exist (a missing key makes ``get`` wait): one
        ``multi_get`` where this torch has it (2.1+), else one ``get`` each."""
        if not names:
            return {}
        keys = [self.key(n) for n in names]
        values: List[Any]
        if hasattr(self._client(), "multi_get"):
            values = self._run("multi_get", keys)
        else:
            values = [self._run("get", k) for k in keys]
        return {name: bytes(value).decode() for name, value in zip(names, values)}
