"""Running the matrix's subprocesses: logged to a file, stopped gently, in a clean environment."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Dict, List, Mapping, Optional

#: Exit code :func:`run_logged` returns after a timeout (as coreutils ``timeout`` does).
TIMEOUT_RC = 124


def log(msg: str) -> None:
    """Print a progress line at once (the output is often piped into a log)."""
    print(msg, flush=True)


def clean_env(environ: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """``environ`` without the caller's torchrun/torch-elastic settings (they must not leak
    into a check), with ``OMP_NUM_THREADS=1``. ``TRJSC_CLUSTER_PREFIX_SUFFIX`` stays: it only
    names the clusters, so that two runs of the matrix can go on side by side."""
    env = {
        k: v
        for k, v in environ.items()
        if (
            not k.startswith(("PET_", "TORCHELASTIC_", "MASTER_", "TRJSC_"))
            or k == "TRJSC_CLUSTER_PREFIX_SUFFIX"
        )
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PYTHONPATH")
    }
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_logged(
    cmd: List[str],
    logfile: Path,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
    cwd: Optional[Path] = None,
) -> int:
    """Run ``cmd``, append its output to ``logfile``, return the exit code.

    On a timeout the child gets SIGINT and up to 120 s to finish (:data:`TIMEOUT_RC` is
    returned); on Ctrl-C, which reached the child too, the same grace before it is killed,
    so that a pytest run can tear its cluster down.
    """
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            fh.write(f"TIMEOUT after {timeout}s\n")
            stop(proc, signal.SIGINT)
            return TIMEOUT_RC
        except KeyboardInterrupt:
            # a subprocess.run would SIGKILL the child after 0.25 s and leave namespaces behind
            stop(proc, None)
            raise


def stop(proc: subprocess.Popen[bytes], sig: Optional[signal.Signals], grace: float = 120) -> None:
    """Send ``sig`` (if any), wait up to ``grace`` seconds for a clean exit, then kill."""
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


def tail(logfile: Path, n: int = 8) -> str:
    """The last ``n`` lines of ``logfile``, indented for the terminal."""
    try:
        lines = logfile.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    | " + line for line in lines[-n:])
