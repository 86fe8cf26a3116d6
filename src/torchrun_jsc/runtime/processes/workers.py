"""This agent's worker processes: registered, watched (:class:`Workers`, one per process, in
its runtime: :mod:`torchrun_jsc.runtime.agent`).

The ``worker_start`` patch registers every worker torch starts (and hands it to the orphan
watcher, :mod:`torchrun_jsc.runtime.processes.orphans`). The registry keeps each worker's
``Popen``; a thread per worker waits for its exit without reaping it (``waitid(WNOWAIT)``;
torch still reaps) and notes the wall-clock time, so failures on different nodes can be ordered
by when they happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence


class Workers:
    """The workers torch started in this agent: their ``Popen``, when each ended, which ones
    torchrun_jsc stopped, and the out-of-memory count when the first one started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._before: List[Callable[[Sequence[str]], None]] = []
        self._procs: Dict[int, Any] = {}
        self._exits: Dict[int, float] = {}
        self._stopped: Dict[int, bool] = {}
        self._oom_baseline: Optional[int] = None

    def before_start(self, callback: Callable[[Sequence[str]], None]) -> Callable[[], None]:
        """Have ``callback(command)`` called with each worker's command line just before the
        worker starts; returns what ends that."""
        self._before.append(callback)

        def end() -> None:
            if callback in self._before:
                self._before.remove(callback)

        return end

    def starting(self, command: Sequence[str]) -> None:
        """A worker with the command line ``command`` is about to start (``worker_start``)."""
        for callback in list(self._before):
            callback(command)

    def register(self, proc: Any) -> None:
        """Remember a started worker (a ``Popen``) and watch for its exit."""
        with self._lock:
            self._procs[proc.pid] = proc
            if self._oom_baseline is None:
                self._oom_baseline = oom_kills()
        threading.Thread(
            target=self._watch, args=(proc.pid,), daemon=True, name="trjsc-exit"
        ).start()

    def _watch(self, pid: int) -> None:
        # Already reaped by torch (an error): the time noted is then a little late.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        with self._lock:
            self._exits.setdefault(pid, time.time())

    def live(self) -> List[Any]:
        """Registered workers that have not been reaped."""
        with self._lock:
            return [
                p for p in self._procs.values() if p.returncode is None and p.pid not in self._exits
            ]

    def exit_times(self, pids: List[int], wait: float) -> Dict[int, float]:
        """When each of ``pids`` (ended workers) ended, as far as known. A registered worker's
        watcher may not have run since its exit (a loaded node, an agent slowed by memory
        pressure): this waits up to ``wait`` seconds for those."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                known = {pid: self._exits[pid] for pid in pids if pid in self._exits}
                pending = any(pid in self._procs and pid not in self._exits for pid in pids)
            if not pending or time.monotonic() >= deadline:
                return known
            time.sleep(0.01)

    def stopped_by_us(self, pid: int) -> bool:
        """Whether torchrun_jsc stopped this worker (then its failure only follows another)."""
        with self._lock:
            return self._stopped.get(pid, False)

    def signal_all(self, signum: int) -> int:
        """Send ``signum`` to every live worker process (not its children); how many got it."""
        sent = 0
        for proc in self.live():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signum)
                sent += 1
        return sent

    def stop_all(self, grace: float) -> int:
        """SIGTERM every live worker's process group, SIGKILL what is left after ``grace``
        seconds; returns how many were stopped."""
        procs = self.live()
        with self._lock:
            for proc in procs:
                self._stopped[proc.pid] = True
        for proc in procs:
            _kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.live():
            time.sleep(0.1)
        for proc in self.live():
            _kill(proc.pid, signal.SIGKILL)
        return len(procs)

    def oom_since_start(self) -> bool:
        """Whether the memory cgroup's out-of-memory killer struck since the first worker
        started."""
        now = oom_kills()
        with self._lock:
            base = self._oom_baseline
        return now is not None and base is not None and now > base


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def oom_kills() -> Optional[int]:
    """The ``oom_kill`` count of this process's memory cgroup (v2 ``memory.events``, v1
    ``memory.oom_control``); None when it cannot be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidate = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
        elif "memory" in controllers.split(","):
            candidate = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"
        else:
            continue
        count = _oom_count(candidate)
        if count is not None:
            return count
    return None


def _oom_count(path: Path) -> Optional[int]:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, number = line.partition(" ")
        if name == "oom_kill" and number.strip().isdigit():
            return int(number)
    return None
