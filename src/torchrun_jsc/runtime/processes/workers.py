"""This agent's worker processes: registered, watched.

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

_lock = threading.Lock()
_before: List[Callable[[Sequence[str]], None]] = []
_procs: Dict[int, Any] = {}
_exits: Dict[int, float] = {}
_stopped: Dict[int, bool] = {}
_oom_baseline: Optional[int] = None


def before_start(callback: Callable[[Sequence[str]], None]) -> Callable[[], None]:
    """Have ``callback(command)`` called with each worker's command line just before the worker
    starts; returns what ends that."""
    _before.append(callback)

    def end() -> None:
        if callback in _before:
            _before.remove(callback)

    return end


def starting(command: Sequence[str]) -> None:
    """A worker with the command line ``command`` is about to start (``worker_start``)."""
    for callback in list(_before):
        callback(command)


def register(proc: Any) -> None:
    """Remember a started worker (a ``Popen``) and watch for its exit."""
    global _oom_baseline
    with _lock:
        _procs[proc.pid] = proc
        if _oom_baseline is None:
            _oom_baseline = oom_kills()
    threading.Thread(target=_watch, args=(proc.pid,), daemon=True, name="trjsc-exit").start()


def _watch(pid: int) -> None:
    # Already reaped by torch (an error): the time noted is then a little late.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    with _lock:
        _exits.setdefault(pid, time.time())


def live() -> List[Any]:
    """Registered workers that have not been reaped."""
    with _lock:
        return [p for p in _procs.values() if p.returncode is None and p.pid not in _exits]


def exit_times(pids: List[int], wait: float) -> Dict[int, float]:
    """When each of ``pids`` (ended workers) ended, as far as known. A registered worker's watcher
    may not have run since its exit (a loaded node, an agent slowed by memory pressure): this
    waits up to ``wait`` seconds for those."""
    deadline = time.monotonic() + wait
    while True:
        with _lock:
            known = {pid: _exits[pid] for pid in pids if pid in _exits}
            pending = any(pid in _procs and pid not in _exits for pid in pids)
        if not pending or time.monotonic() >= deadline:
            return known
        time.sleep(0.01)


def stopped_by_us(pid: int) -> bool:
    """Whether torchrun_jsc stopped this worker (then its failure only follows another)."""
    with _lock:
        return _stopped.get(pid, False)


def signal_all(signum: int) -> int:
    """Send ``signum`` to every live worker process (not its children); how many got it."""
    sent = 0
    for proc in live():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signum)
            sent += 1
    return sent


def stop_all(grace: float) -> int:
    """SIGTERM every live worker's process group, SIGKILL what is left after ``grace``
    seconds; returns how many were stopped."""
    procs = live()
    with _lock:
        for proc in procs:
            _stopped[proc.pid] = True
    for proc in procs:
        _kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and live():
        time.sleep(0.1)
    for proc in live():
        _kill(proc.pid, signal.SIGKILL)
    return len(procs)


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


def oom_since_start() -> bool:
    """Whether the memory cgroup's out-of-memory killer struck since the first worker started."""
    now = oom_kills()
    with _lock:
        base = _oom_baseline
    return now is not None and base is not None and now > base


def forget() -> None:
    """Drop every registered worker (tests)."""
    global _oom_baseline
    with _lock:
        _procs.clear()
        _exits.clear()
        _stopped.clear()
        _oom_baseline = None
