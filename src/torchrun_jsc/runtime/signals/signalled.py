"""A stop by a signal (SIGTERM from scancel or the time limit, SIGINT, SIGHUP, SIGQUIT): which
signal came first and when, and the one line the agent ends with instead of torch's traceback.

torch's termination handler raises ``SignalException`` in the agent's main thread; torch then
stops the workers (SIGTERM, the grace, SIGKILL) and re-raises it, and the process would end
with its traceback. A second signal during that shutdown raised again inside torch's logging
(``--- Logging error ---`` and a second traceback). The ``stop_signal`` patch lets only the
first one raise and notes it here; ``torchrun_jsc.cli`` prints :func:`line` and exits with
torch's code (1).
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
import time
from typing import Mapping, NamedTuple, Optional, Tuple

#: torch's exit code for an agent stopped by a signal (its exception ends the process).
EXIT_CODE = 1
#: How long the stop may wait for Slurm to say what happened to the job.
SLURM_WAIT = 2.0

#: Slurm's job states at a stop, and what they mean for the user.
_SLURM_CAUSES = {
    "CANCELLED": "the job was cancelled (scancel)",
    "TIMEOUT": "the job reached its time limit",
    "NODE_FAIL": "a node of the job failed",
    "PREEMPTED": "the job was preempted",
    "DEADLINE": "the job reached its deadline",
}


class Stops:
    """The stop signals this agent got: the first one and when, and whether they are ignored
    from now on (one per process, in its runtime: :mod:`torchrun_jsc.runtime.agent`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: Optional[Tuple[int, float]] = None
        self._held = threading.Event()

    def note(self, signum: int) -> bool:
        """Note a stop signal; whether it is the first."""
        with self._lock:
            if self._first is None:
                self._first = (signum, time.monotonic())
                return True
            return False

    def hold(self) -> None:
        """From now on stop signals are ignored: this agent ends by itself (its job is being
        requeued, which brings Slurm's SIGTERM). Any thread may call it; the handler, in the
        main thread, looks."""
        self._held.set()

    def held(self) -> bool:
        """Whether stop signals are ignored (:meth:`hold`)."""
        return self._held.is_set()

    def first(self) -> Optional[Tuple[int, float]]:
        """The first stop signal and its monotonic time, if one came."""
        with self._lock:
            return self._first


#: The signals torch stops the agent with.
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def ignore_further() -> None:
    """The workers are stopped and the agent is ending: a later stop signal (Slurm sends more
    than one) must not end it half-way through its exit (Python's own end puts the default
    handlers back), which would cut the last line off and turn exit code 1 into 143. The
    exit's own waits are bounded (the job watch's), and SIGKILL still ends it."""
    for name in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


class JobInfo(NamedTuple):
    """What ``scontrol -o show job`` says about the job at the stop."""

    state: str
    run_time: Optional[float] = None
    time_limit: Optional[float] = None
    reason: str = ""


def seconds(text: str) -> Optional[float]:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``minutes:seconds``) in seconds; None for
    ``UNLIMITED`` and anything else."""
    found = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not found:
        return None
    days, hours, minutes, secs = (int(g) if g else 0 for g in found.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + secs)


def job_info(output: str) -> Optional[JobInfo]:
    """The job's state, run time and time limit from ``scontrol -o show job`` output."""
    fields = dict(re.findall(r"(?:^|\s)(JobState|RunTime|TimeLimit|Reason)=(\S+)", output))
    if "JobState" not in fields:
        return None
    return JobInfo(
        fields["JobState"],
        seconds(fields.get("RunTime", "")),
        seconds(fields.get("TimeLimit", "")),
        fields.get("Reason", ""),
    )


def slurm_cause(info: Optional[JobInfo]) -> Optional[str]:
    """What the job's state at a stop says about its cause (None when it says nothing).
    While the job ends, Slurm 22.05 shows only ``COMPLETING``: its run time against its time
    limit then tells a time limit from a cancel."""
    if info is None:
        return None
    state = info.state.rstrip("+")
    if state in _SLURM_CAUSES:
        return _SLURM_CAUSES[state]
    if state == "COMPLETING":
        ran, limit = info.run_time, info.time_limit
        reached = ran is not None and limit is not None and ran >= limit - 1
        if reached or info.reason == "TimeLimit":
            return _SLURM_CAUSES["TIMEOUT"]
        return "the job was cancelled (scancel) or lost a node"
    if state == "RUNNING":
        return "the step was cancelled (scancel of the step, or srun ended it)"
    return None


def ask_slurm(job: str) -> Optional[JobInfo]:
    """The job as ``scontrol`` sees it, or None when Slurm does not answer in time."""
    try:
        done = subprocess.run(
            ["scontrol", "-o", "show", "job", job],
            capture_output=True,
            text=True,
            timeout=SLURM_WAIT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return job_info(done.stdout) if done.returncode == 0 else None


def line(
    sigval: int,
    env: Mapping[str, str],
    info: Optional[JobInfo],
    now: float,
    seen: Optional[Tuple[int, float]] = None,
) -> str:
    """``torchrun_jsc: stopped by SIGTERM from Slurm (the job was cancelled (scancel));
    workers ended after 1.2 s`` (``seen``: the first stop signal and when it came)."""
    try:
        name = signal.Signals(sigval).name
    except ValueError:
        name = f"signal {sigval}"
    job = env.get("SLURM_JOB_ID", "")
    cause = slurm_cause(info)
    if cause is not None:
        source = f" from Slurm ({cause})"
    elif job:
        state = info.state if info is not None else "its state unknown"
        source = f" (inside Slurm job {job}, {state})"
    else:
        source = ""
    took = f"; workers ended after {now - seen[1]:.1f} s" if seen is not None else ""
    return f"torchrun_jsc: stopped by {name}{source}{took}"
