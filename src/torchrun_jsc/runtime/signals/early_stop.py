"""A stop signal before torch's own handlers are in place: one line, at once.

torch registers its handlers for SIGTERM, SIGINT, SIGHUP and SIGQUIT only when it starts the
first worker. Before that (importing torch, planning, the rendezvous, waiting for a late host) a
SIGTERM or SIGHUP ended the agent silently with 143 or 129, and a SIGINT became the one-line
interruption only once the main thread was back in Python (up to a connection attempt later).

:meth:`EarlyStop.install` (the ``torchrun_jsc`` command's first step, on the process's
runtime's one) gives each of those signals that
is at its default a handler of its own; the signal also wakes a thread (Python's wakeup file
descriptor), so the stop happens at once even while the main thread is inside torch's C++. The
agent then prints the line its later stops print (``torchrun_jsc: stopped by SIGTERM ...; no
worker had started``) and ends with the same exit code (1); SIGINT keeps its line
(``interrupted before the launch; nothing was started``) and 130. Once torch has put its own
handler in place for a signal, this one does nothing more for it: torch's (and the
``stop_signal`` patch's) handling is unchanged.

While the main thread is inside torch's connection to the store (:meth:`EarlyStop.held`),
those signals are held off it, so only the wake thread takes them: torch's C++ retry is not
interrupted (it logs an interrupted wait with some 40 lines of stack frames, before the
stop's line).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Callable, FrozenSet, Iterable, Iterator, Mapping, Optional

from .. import timing
from . import signalled

#: The line of an interruption (SIGINT) before any worker started.
INTERRUPTED = "torchrun_jsc: interrupted before the launch; nothing was started"
#: The exit code of that interruption (128 + SIGINT), as a shell reports it.
INTERRUPTED_CODE = 130


def _numbers(names: Iterable[str]) -> FrozenSet[int]:
    return frozenset(
        int(getattr(signal, name)) for name in names if isinstance(getattr(signal, name, None), int)
    )


class EarlyStop:
    """The handling of stop signals before torch's: which signals it has, what the agent waits
    for meanwhile (said in the line), and whether a stop has begun."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = False
        #: Set once the first stop has ended the process (only seen where exit returns).
        self._over = threading.Event()
        #: The signals handled here (by number), until torch's own handler replaces this one.
        self._active: FrozenSet[int] = frozenset()
        #: Whether the wake thread runs (without it, a held signal would wait for the block).
        self._waking = False
        self._env: Mapping[str, str] = {}
        self._doing: Optional[str] = None
        self._doing_since = 0.0
        self.exit: Callable[[int], None] = os._exit
        #: Given the stop's line and exit code before the line is printed (the runtime's:
        #: the event log); run in a thread of its own and waited for at most
        #: :data:`~..timing.EVENTS_WAIT` seconds.
        self.on_stop: Callable[[str, int], None] = lambda line, code: None
        #: The handler, one object (a signal's current handler is compared with it).
        self.handler = self._handle

    def install(self, env: Mapping[str, str]) -> None:
        """Handle SIGTERM, SIGHUP and SIGQUIT (those at their default) and watch SIGINT, until
        torch installs its handlers. Main thread only; a second call does nothing."""
        if threading.current_thread() is not threading.main_thread() or self._active:
            return
        self._env = env
        active = set()
        for number in _numbers(signalled.STOP_SIGNALS):
            if number == signal.SIGINT:
                if signal.getsignal(number) is signal.default_int_handler:
                    active.add(number)
            elif signal.getsignal(number) is signal.SIG_DFL:
                signal.signal(number, self.handler)
                active.add(number)
        self._active = frozenset(active)
        self._wake_thread()

    def keep_only(self, names: Iterable[str]) -> None:
        """After the plan: only the signals torch will handle (``names``) stay here; the others
        get their default back (torch never replaces those, and their stop is not torch's)."""
        keep = _numbers(names)
        for number in self._active - keep:
            if signal.getsignal(number) == self.handler:
                signal.signal(number, signal.SIG_DFL)
        self._active = self._active & keep

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The signals still handled here are held off the calling thread for the block; the
        wake thread takes them at once. Without a wake thread, nothing is held."""
        numbers = [n for n in self._active if not self.torch_took_over(n)]
        if not numbers or not self._waking:
            yield
            return
        before = signal.pthread_sigmask(signal.SIG_BLOCK, numbers)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    def doing(self, what: Optional[str]) -> None:
        """What the agent waits for now (said in the line of a stop), or None."""
        self._doing, self._doing_since = what, time.monotonic()

    def line(self, signum: int, info: Optional[signalled.JobInfo], now: float) -> str:
        """``torchrun_jsc: stopped by SIGTERM (inside Slurm job 12, RUNNING); no worker had
        started (waiting for the rendezvous host node0i:29500 for 14 s)``."""
        head = signalled.line(signum, self._env, info, now)
        doing = self._doing
        waiting = f" ({doing} for {now - self._doing_since:.0f} s)" if doing else ""
        return f"{head}; no worker had started{waiting}"

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        self._stop(signum)

    def _stop(self, signum: int) -> None:
        """Print the stop's line and end the process (the first caller; a later one, the main
        thread's interruption beside the wake thread's, waits for it to end the process)."""
        with self._lock:
            first = not self._stopping
            self._stopping = True
        if not first:
            self._over.wait(signalled.SLURM_WAIT + timing.EVENTS_WAIT + 1.0)
            return
        if signum == signal.SIGINT:
            text, code = INTERRUPTED, INTERRUPTED_CODE
        else:
            job = self._env.get("SLURM_JOB_ID")
            info = signalled.ask_slurm(job) if job else None
            text, code = self.line(signum, info, time.monotonic()), signalled.EXIT_CODE
        try:
            self._tell(text, code)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os.write(2, (text + "\n").encode(errors="backslashreplace"))
        finally:
            try:
                self.exit(code)
            finally:
                self._over.set()  # only reached when exit returns (tests)

    def _tell(self, text: str, code: int) -> None:
        """:attr:`on_stop`, in a thread of its own (the main thread may hold what it needs),
        for at most :data:`~..timing.EVENTS_WAIT` seconds; what it raises is dropped."""

        def run() -> None:
            with contextlib.suppress(Exception):
                self.on_stop(text, code)

        thread = threading.Thread(target=run, name="torchrun_jsc-early-stop-log", daemon=True)
        thread.start()
        thread.join(timing.EVENTS_WAIT)

    def interrupted(self) -> None:
        """The main thread's KeyboardInterrupt before the launch: the same line, once."""
        self._stop(signal.SIGINT)
        raise SystemExit(INTERRUPTED_CODE)  # only reached when exit returns (tests)

    def torch_took_over(self, signum: int) -> bool:
        """Whether torch's own handler (or anyone else's) has replaced this one for
        ``signum``."""
        current = signal.getsignal(signum)
        if signum == signal.SIGINT:
            return current is not signal.default_int_handler
        return current != self.handler

    def _consider(self, signum: int) -> None:
        """A signal woke the thread: stop now if it is still this object's to handle."""
        if signum in self._active and not self.torch_took_over(signum):
            self._stop(signum)

    def _wake_thread(self) -> None:
        """Python's wakeup file descriptor: its C-level handler writes each signal's number
        there at once, and this thread reads it while the main thread may be inside C++."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        try:
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read_end)
            os.close(write_end)
            return
        thread = threading.Thread(
            target=self._read, args=(read_end,), name="torchrun_jsc-early-stop", daemon=True
        )
        thread.start()
        self._waking = True

    def _read(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            for number in data:
                self._consider(number)
