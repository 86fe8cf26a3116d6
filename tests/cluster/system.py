"""The harness's contact with the machine: running commands, reading /proc, requirements."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

SLURM_BINARIES = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "sinfo", "scontrol")
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


class ClusterError(RuntimeError):
    """The cluster could not be brought up or is in use by someone else."""


def find_binary(name: str) -> Optional[str]:
    """Path of a (Slurm/system) binary, also looking in sbin directories."""
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def missing_requirements() -> list[str]:
    """Why a cluster cannot be built here (empty if it can): root, namespaces, binaries."""
    why: list[str] = []
    if os.geteuid() != 0:
        why.append(f"needs root (euid {os.geteuid()})")
        return why
    for tool in ("ip", "unshare", "hostname", "setsid"):
        if not find_binary(tool):
            why.append(f"missing tool {tool!r}")
    missing = [b for b in SLURM_BINARIES if not find_binary(b)]
    if missing:
        why.append("missing Slurm binaries: " + ", ".join(missing))
    if not why:
        probe = subprocess.run(
            ["unshare", "--net", "--uts", "true"], capture_output=True, text=True, check=False
        )
        if probe.returncode != 0:
            why.append(f"cannot create network namespaces: {probe.stderr.strip()}")
    return why


def run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end, output captured; ClusterError if it fails and ``check``."""
    r = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and r.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip <args>`` (see :func:`run`)."""
    return run(["ip", *args], check=check)


def write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` (parents created) with permissions ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def crash_dump(text: str, lines: int = 40) -> str:
    """The first fatal-error dump (Python's faulthandler) in ``text``: its header and the
    crashed thread's stack (``Current thread ...``, wherever faulthandler listed it among the
    threads), at most ``lines`` lines; the header and the lines after it when no thread is
    marked current (a thread Python does not know crashed); empty when there is no dump."""
    found = text.splitlines()
    start = next((i for i, line in enumerate(found) if "Fatal Python error" in line), None)
    if start is None:
        return ""
    header = []
    for line in found[start:]:
        if line.startswith(("Thread 0x", "Current thread 0x")):
            break
        header.append(line)
    current = next(
        (i for i in range(start, len(found)) if found[i].startswith("Current thread 0x")), None
    )
    if current is None:
        return "\n".join(found[start : start + lines])
    stack = [found[current]]
    for line in found[current + 1 :]:
        if not line.startswith("  "):
            break
        stack.append(line)
    return "\n".join((header + stack)[:lines])


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name (state first); OSError if gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except OSError:
        return False


def proc_state(pid: int) -> str:
    """One-letter state of ``pid`` from /proc (``"T"`` stopped, ``"S"`` sleeping...), or ``""``."""
    try:
        return _stat_fields(pid)[0]
    except OSError:
        return ""


def ppid(pid: int) -> int:
    """Parent of ``pid``, or 0 if it is gone."""
    try:
        return int(_stat_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return 0


def cmdline(pid: int) -> str:
    """Command line of ``pid``, arguments joined by spaces (``""`` if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def is_stepd(pid: int) -> bool:
    """A slurmstepd (its title is ``slurmstepd: [job.step]``); it ignores SIGTERM."""
    return cmdline(pid).startswith("slurmstepd")


def clean_env(extra: Optional[Mapping[str, str]]) -> dict[str, str]:
    """Our environment without anything a surrounding Slurm job or launcher set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SLURMD_", "PMI_", "PMIX_", "TORCHELASTIC_"))
        and k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(extra or {})
    return env
