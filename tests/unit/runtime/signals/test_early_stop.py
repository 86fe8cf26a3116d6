"""The stop before torch's handlers tells the runtime (the event log) before its line, and
never waits for it longer than its bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import List, Tuple

import pytest

from tests.unit.procs import stop_signals_default
from torchrun_jsc.runtime import agent, timing
from torchrun_jsc.runtime.signals.early_stop import INTERRUPTED, INTERRUPTED_CODE, EarlyStop


def caught(monkeypatch: pytest.MonkeyPatch) -> Tuple[EarlyStop, List[object]]:
    """An early stop whose line and exit are recorded, in order, with what ``on_stop`` got."""
    seen: List[object] = []
    monkeypatch.setattr(os, "write", lambda fd, data: seen.append(("line", data.decode())))
    stop = EarlyStop()
    stop.exit = lambda code: seen.append(("exit", code))
    stop.on_stop = lambda line, code: seen.append(("told", line, code))
    return stop, seen


def test_the_runtime_is_told_the_line_before_it_is_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop, seen = caught(monkeypatch)
    stop.doing("waiting for the rendezvous host h:1")
    stop._stop(signal.SIGTERM)
    told, line, ended = seen
    assert told[0] == "told" and told[2] == 1
    assert str(told[1]).startswith("torchrun_jsc: stopped by SIGTERM; no worker had started")
    assert line == ("line", f"{told[1]}\n") and ended == ("exit", 1)
    stop._stop(signal.SIGTERM)  # the first caller only
    assert len(seen) == 3


def test_an_interruption_is_told_as_its_own_line(monkeypatch: pytest.MonkeyPatch) -> None:
    stop, seen = caught(monkeypatch)
    stop._stop(signal.SIGINT)
    assert seen[0] == ("told", INTERRUPTED, INTERRUPTED_CODE)
    assert seen[-1] == ("exit", INTERRUPTED_CODE)


def test_a_hanging_or_failing_listener_costs_at_most_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timing, "EVENTS_WAIT", 0.2)
    for hook in (lambda line, code: threading.Event().wait(30), lambda line, code: 1 / 0):
        stop, seen = caught(monkeypatch)
        stop.on_stop = hook
        started = time.monotonic()
        stop._stop(signal.SIGTERM)
        assert time.monotonic() - started < 2
        assert [s[0] for s in seen] == ["line", "exit"]  # type: ignore[index]


def test_the_runtime_passes_the_stop_to_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = agent.Runtime()
    got: List[Tuple[str, int]] = []

    class Session:
        def stopped_early(self, line: str, code: int) -> None:
            got.append((line, code))

    runtime.early_stop.on_stop("no session yet", 1)
    runtime.session = Session()  # type: ignore[assignment]
    runtime.early_stop.on_stop("torchrun_jsc: stopped by SIGTERM", 1)
    assert got == [("torchrun_jsc: stopped by SIGTERM", 1)]


def test_a_second_stop_waits_for_the_first_to_end_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wake thread's stop and the main thread's interruption, both for one Ctrl-C: the
    later one returns only once the first has written its line and ended the process (the
    main thread's SystemExit ended it without the line)."""
    stop, seen = caught(monkeypatch)
    telling = threading.Event()

    def slow(line: str, code: int) -> None:
        telling.set()
        time.sleep(0.3)

    stop.on_stop = slow
    first = threading.Thread(target=stop._stop, args=(signal.SIGINT,))
    first.start()
    assert telling.wait(5)
    stop._stop(signal.SIGINT)  # returns after the first has ended the process
    assert seen == [("line", INTERRUPTED + "\n"), ("exit", INTERRUPTED_CODE)]
    first.join(5)


#: A child that sleeps 1 s in C (libc's nanosleep, which a handled signal interrupts) while a
#: thread sends it SIGTERM after 0.2 s; held (``sys.argv[1] == "held"``) or not. It prints
#: nanosleep's result and what the stop's exit got.
_SLEEPER = """
import ctypes, os, signal, sys, threading, time
from torchrun_jsc.runtime.signals.early_stop import EarlyStop

class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

stop = EarlyStop()
ended = []
stop.exit = ended.append
stop.install({})
libc = ctypes.CDLL(None, use_errno=True)
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
if sys.argv[1] == "held":
    with stop.held():
        got = libc.nanosleep(ctypes.byref(Timespec(1, 0)), None)
else:
    got = libc.nanosleep(ctypes.byref(Timespec(1, 0)), None)
deadline = time.monotonic() + 5
while not ended and time.monotonic() < deadline:
    time.sleep(0.05)
print(got, ended)
"""


@pytest.mark.parametrize(("how", "slept"), [("held", "0"), ("not held", "-1")])
def test_a_held_stop_is_taken_by_the_wake_thread_and_leaves_the_c_wait_alone(
    how: str, slept: str
) -> None:
    """Held, the main thread's C wait runs its full time and the stop still happens (exit 1)
    at once; not held, the signal interrupts it (torch's connection logs such an
    interruption with its stack frames)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _SLEEPER, how],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        preexec_fn=stop_signals_default,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [slept, "[1]"], done.stdout + done.stderr
    assert done.stderr.startswith("torchrun_jsc: stopped by SIGTERM; no worker had started")
