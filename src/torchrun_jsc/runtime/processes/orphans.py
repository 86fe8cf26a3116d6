"""No orphans: one watcher process per agent kills the agent's workers when the agent ends.

The agent starts the watcher once, before its first worker: ``python -I -S <this file> <agent
pid>``, in a session of its own, its standard input a pipe whose only writer is the agent. For
every worker it starts, the agent writes ``<pid> <start time>`` (the start time from
``/proc/<pid>/stat``, read while the agent is the worker's unreaped parent, so the number cannot
belong to another process yet). When the pipe closes, which the kernel does however the agent
ends (SIGKILL included), the watcher kills every listed worker that is still the same process
(same start time): the process group it leads, else the process; it names them on stderr.

Nothing of this is on a worker's start: one line written per worker, no program in between.
The watcher ignores the signals a job sends to all its processes (a Slurm step's SIGTERM or
``--signal``, a terminal's SIGINT); it ends with the pipe. This file runs as that program, with
the standard library only.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # not typing's: the watcher starts without importing typing
if TYPE_CHECKING:
    from typing import IO, Iterable, List, Optional, Tuple

#: Signals the watcher ignores: sent to every process of a job, they are the agent's business.
IGNORED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def proc_stat(pid: int) -> Optional[Tuple[str, List[str]]]:
    """The name in ``/proc/<pid>/stat`` and the fields after it (``[0]`` the state, ``[1]`` the
    parent's pid, ``[19]`` the start time in clock ticks since boot); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    if len(fields) < 20:
        return None
    return head.partition("(")[2], fields


def start_time(pid: int) -> Optional[str]:
    """A process's start time (field 22 of ``/proc/<pid>/stat``), or None if it is gone."""
    found = proc_stat(pid)
    return None if found is None else found[1][19]


def parse(lines: Iterable[str]) -> List[Tuple[int, str]]:
    """The ``(pid, start time)`` pairs the agent wrote; other lines are ignored."""
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            found.append((int(parts[0]), parts[1]))
    return found


def kill_left(workers: Iterable[Tuple[int, str]]) -> List[int]:
    """SIGKILL each worker that is still running as the process that was started; the pids
    killed."""
    killed = []
    for pid, started in workers:
        found = proc_stat(pid)
        if found is None or found[1][19] != started or found[1][0] in ("Z", "X"):
            continue  # ended (a zombie is dead too; and the number may have been reused)
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        killed.append(pid)
    return killed


def watch(agent: int, source: IO[str]) -> List[int]:
    """Read ``source`` until the agent closes it, then kill what is left; the pids killed."""
    workers = parse(source)
    killed = kill_left(workers)
    if killed:
        sys.stderr.write(
            f"torchrun_jsc: the agent (pid {agent}) ended and left {len(killed)} worker(s)"
            f" running; killed them (pid {', '.join(map(str, killed))})\n"
        )
        sys.stderr.flush()
    return killed


# ---------------------------------------------------------------------- the agent's side


class Watcher:
    """This agent's orphan watcher (a process of its own, started once): every worker handed
    to it is killed when the agent ends, even by SIGKILL."""

    def __init__(self) -> None:
        self._pipe: Optional[int] = None
        self._process: object = None  # its Popen, kept so that it is never collected

    def start(self) -> Optional[str]:
        """Start the watcher (once); None, or why it could not start."""
        if self._pipe is not None:
            return None
        import subprocess

        read, write = os.pipe()  # both ends close on exec: only the watcher gets ``read``
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())],
                stdin=read,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(write)
            return f"the watcher did not start ({exc})"
        finally:
            os.close(read)
        self._pipe = write
        return None

    def tell(self, pid: int) -> None:
        """Hand a just-started worker (a child of this process) to the watcher."""
        started = start_time(pid)
        if self._pipe is None or started is None:
            return
        import contextlib  # here, not at the top: the watcher itself needs none of it

        with contextlib.suppress(OSError):  # the watcher is gone: nothing to tell
            os.write(self._pipe, f"{pid} {started}\n".encode())

    def stop(self) -> None:
        """Close the pipe (tests): the watcher kills what is left and ends."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None


def main(argv: List[str]) -> int:
    """The watcher: ``orphans.py <agent pid>``."""
    for name in IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    watch(int(argv[1]), sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
