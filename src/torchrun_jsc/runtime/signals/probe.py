"""The signal probe: a process placed like the workers that reports every SIGUSR1/SIGUSR2 it
gets, so the agent can tell whether a signal's sender reached the workers too.

The agent starts it once, just before its first worker, as a child of its own, in a session of
its own, in the agent's cgroup, with the worker's command line after its own
(``python -I -S -c <CODE> <worker's argv>``; :data:`CODE` runs this file, named in the
environment with the signals, so no path of the project is on the command line): where Slurm
(or anyone, ``pkill -f`` included) sends a signal to the processes of a step or of a command,
the probe is among them exactly when the workers are. It waits for the signals with
``sigwaitinfo`` (they are blocked from its start on) and writes one line per signal to its
standard output, a pipe to the agent: ``<number> <time.monotonic()> <sender pid> <sender's
name>``. It ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT (a job's ending is the agent's business)
and ends when its standard input, a pipe whose only writer is the agent, closes, however the
agent ends. This file runs as that program, with the standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

TYPE_CHECKING = False  # not typing's: the probe starts without importing typing
if TYPE_CHECKING:
    from typing import IO, Callable, List, MutableMapping, Optional, Sequence

    from .direct import Receipt


#: Signals the probe ignores: they end a job, and ending is the agent's business.
IGNORED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
#: The environment variables that name this file and the signals (comma-separated) to the probe.
PROGRAM_VARIABLE = "SIGNAL_PROBE_PROGRAM"
SIGNALS_VARIABLE = "SIGNAL_PROBE_SIGNALS"
#: The probe's program on its command line: runs the file :data:`PROGRAM_VARIABLE` names.
CODE = f"import os,runpy;runpy.run_path(os.environ.pop('{PROGRAM_VARIABLE}'),run_name='__main__')"


def sender_name(pid: int) -> str:
    """The command name of process ``pid`` (``/proc/<pid>/comm``), or ``?`` if it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip() or "?"
    except OSError:
        return "?"


def report_line(signum: int, at: float, sender: int) -> str:
    """The line the probe writes for one signal."""
    return f"{signum} {at:.6f} {sender} {sender_name(sender)}\n"


def parse_line(line: str) -> Optional[Receipt]:
    """A probe's line as a :class:`~torchrun_jsc.runtime.signals.direct.Receipt`; None if it is
    not one."""
    from .direct import Receipt

    parts = line.split(None, 3)
    if len(parts) != 4 or not parts[0].isdigit() or not parts[2].isdigit():
        return None
    try:
        at = float(parts[1])
    except ValueError:
        return None
    return Receipt(int(parts[0]), at, int(parts[2]), parts[3].strip())


def command_line(worker: Sequence[str]) -> List[str]:
    """The probe's command line, for a worker whose command line is ``worker``."""
    return [sys.executable, "-I", "-S", "-c", CODE, *worker]


def main(environ: MutableMapping[str, str]) -> int:
    """The probe, for the signals :data:`SIGNALS_VARIABLE` names (``SIGUSR1,SIGUSR2``)."""
    names = environ.pop(SIGNALS_VARIABLE, "")
    numbers = {int(getattr(signal, name)) for name in names.split(",") if name}
    signal.pthread_sigmask(signal.SIG_BLOCK, numbers)  # the agent started it so already
    for name in IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    threading.Thread(target=_end_with_pipe, args=(sys.stdin,), daemon=True).start()
    while True:
        info = signal.sigwaitinfo(numbers)
        try:
            sys.stdout.write(report_line(info.si_signo, time.monotonic(), info.si_pid))
            sys.stdout.flush()
        except OSError:  # the agent is gone
            return 0


def _end_with_pipe(source: IO[str]) -> None:
    while source.read(4096):
        pass
    os._exit(0)


# ---------------------------------------------------------------------- the agent's side


class Probe:
    """The agent's handle on its probe: starts it, collects its receipts (oldest first) under
    :attr:`changed`, a condition that is notified on every receipt and when the probe ends."""

    def __init__(self, signals: Sequence[int]) -> None:
        self.receipts: List[Receipt] = []
        self.changed = threading.Condition()
        self.problem: Optional[str] = None
        self.running = False
        self._stopping = False
        self._on_end: Optional[Callable[[str], None]] = None
        self._proc: object = None
        self._pipe: Optional[int] = None
        self._reader: Optional[threading.Thread] = None
        self._signals = tuple(signals)

    def start(self, on_end: Callable[[str], None], worker: Sequence[str]) -> Optional[str]:
        """Start the probe with the command line of a worker, ``worker``; None, or why it could
        not start. ``on_end(why)`` is called if it ends before :meth:`stop`."""
        import subprocess

        names = ",".join(signal.Signals(s).name for s in self._signals)
        env = {**os.environ, PROGRAM_VARIABLE: os.path.abspath(__file__), SIGNALS_VARIABLE: names}
        read, write = os.pipe()  # close on exec: only the probe gets ``read``
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)
        try:
            proc = subprocess.Popen(
                command_line(worker),
                env=env,
                stdin=read,
                stdout=subprocess.PIPE,
                start_new_session=True,
                text=True,
            )
        except OSError as exc:
            os.close(write)
            self.problem = f"the signal probe did not start ({exc})"
            return self.problem
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            os.close(read)
        self._proc, self._pipe, self._on_end = proc, write, on_end
        self.running = True
        self._reader = threading.Thread(
            target=self._read, args=(proc.stdout,), daemon=True, name="trjsc-probe"
        )
        self._reader.start()
        return None

    @property
    def pid(self) -> Optional[int]:
        """The probe's pid, while it was started."""
        return getattr(self._proc, "pid", None)

    def _read(self, source: IO[str]) -> None:
        for line in source:
            receipt = parse_line(line)
            if receipt is not None:
                with self.changed:
                    self.receipts.append(receipt)
                    self.changed.notify_all()
        with self.changed:
            self.running = False
            self.changed.notify_all()
            stopping = self._stopping
        wait = getattr(self._proc, "wait", None)
        code = wait() if wait is not None else None
        if not stopping and self._on_end is not None:
            self.problem = f"the signal probe ended (exit code {code})"
            self._on_end(self.problem)

    def stop(self) -> None:
        """Close the probe's pipe: it ends (tests; the agent's end does the same)."""
        with self.changed:
            self._stopping = True
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self._reader is not None:
            self._reader.join(10)


if __name__ == "__main__":
    sys.exit(main(os.environ))
