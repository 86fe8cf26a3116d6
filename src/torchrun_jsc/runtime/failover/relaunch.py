"""Starting this agent process again after a lost rendezvous host (the failover's effect).

The command line starts as ``torchrun_jsc ARGS`` (or ``python -m torchrun_jsc ARGS``); before
anything changes the environment, it keeps the program, the arguments and the environment as
they came (a :class:`Command`, in the process's runtime). :func:`start_again` replaces the
process with the same program under that environment plus
:data:`torchrun_jsc.handover.VARIABLE` (the console script as a script, so that the working
directory does not come first on ``sys.path``; ``-m`` only if it came so): the same process id
(Slurm's task stays the same), a fresh interpreter, a fresh plan. A
process that was not started by the command (``apply_fixes()`` in a script of one's own)
cannot be started again: failover is off there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Dict, List, Mapping, NamedTuple, NoReturn, Optional, Sequence, Tuple

from ... import handover
from ..processes.output import say


class Command(NamedTuple):
    """How this process was started: the program (``sys.argv[0]``), the arguments and the
    environment, as they came."""

    program: str
    args: Tuple[str, ...]
    env: Mapping[str, str]

    @classmethod
    def of(cls, args: Sequence[str], env: Mapping[str, str], program: str = "") -> Command:
        """The command as it came (copies: nothing later changes it)."""
        return cls(program, tuple(args), dict(env))


def command(args: Sequence[str], program: str = "") -> List[str]:
    """The command that starts torchrun_jsc again with ``args``: ``program`` (the console
    script) run by this interpreter, or ``-m torchrun_jsc`` when it was started that way."""
    if not program or program.endswith("__main__.py") or not os.path.isfile(program):
        return [sys.executable, "-m", "torchrun_jsc", *args]
    return [sys.executable, program, *args]


def environment(env: Mapping[str, str], handed: handover.Handover) -> Dict[str, str]:
    """``env`` with the handover for the next process."""
    return {**env, handover.VARIABLE: handover.encode(handed)}


def start_again(started: Optional[Command], handed: handover.Handover) -> NoReturn:
    """Replace this process with the command it was ``started`` with, continuing after
    ``handed`` (None: it was not started by the command, and ends)."""
    if started is None:
        say("torchrun_jsc: cannot go on: this process was not started by the torchrun_jsc command")
        os._exit(1)
    argv = command(started.args, started.program)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(Exception):  # the new process starts with no signal blocked
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
    try:
        os.execve(argv[0], argv, environment(started.env, handed))
    except OSError as exc:
        say(f"torchrun_jsc: cannot go on: starting the agent again failed ({exc})")
        os._exit(1)
