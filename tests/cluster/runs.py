"""Running things on a cluster: on the login node (srun, sbatch, ...) or on a node directly.

Every command runs inside one of the cluster's namespaces with its own UTS hostname and an
environment without a surrounding Slurm job's or launcher's variables. Each leads its own
session, so a timeout ends all of it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from tests.cluster.namespaces import in_ns
from tests.cluster.slurm import node_tmpdir, slurm_conf
from tests.cluster.state import Ledger
from tests.cluster.system import ClusterError, clean_env
from tests.cluster.topology import Layout


class Result(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """A finished command: ``returncode``, ``stdout``, ``stderr`` plus the fields below.

    ``name`` is where it ran (``"login"`` or ``"node2"``), ``elapsed`` the wall time in
    seconds and ``timed_out`` whether the harness had to kill it.
    """

    def __init__(
        self,
        args: Sequence[str],
        returncode: int,
        stdout: str,
        stderr: str,
        *,
        name: str,
        elapsed: float,
        timed_out: bool = False,
    ) -> None:
        super().__init__(list(args), returncode, stdout, stderr)
        self.name = name
        self.elapsed = elapsed
        self.timed_out = timed_out

    @property
    def output(self) -> str:
        """stdout followed by stderr."""
        return (self.stdout or "") + (self.stderr or "")


def split_labeled(text: str) -> dict[int, str]:
    """Split ``srun --label`` output into ``{task id: text}``."""
    parts: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        if m:
            parts.setdefault(int(m.group(1)), []).append(m.group(2))
    return {k: "\n".join(v) for k, v in sorted(parts.items())}


def wait_all(procs: Sequence[subprocess.Popen[Any]], timeout: float) -> list[bool]:
    """Wait for all; on timeout TERM then KILL the process groups still running. Returns
    per process whether it timed out."""
    deadline = time.monotonic() + timeout
    timed_out = [False] * len(procs)
    for k, p in enumerate(procs):
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out[k] = True
    for sig in (signal.SIGTERM, signal.SIGKILL):
        running = [p for p, t in zip(procs, timed_out) if t and p.poll() is None]
        for p in running:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, sig)  # the session node_exec/login created
        for p in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
    return timed_out


class Runs:
    """Commands on the login node and on the nodes of ``layout``."""

    def __init__(self, layout: Layout, ledger: Ledger) -> None:
        self.layout = layout
        self.ledger = ledger
        self._counter = 0

    def login(
        self,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        timeout: float = 120.0,
    ) -> Result:
        """Run ``argv`` on the login node (netns ctl, hostname ctl, SLURM_CONF set), in the
        cluster's workdir (a job's submit directory: what the jobs write there, their event
        logs, stays with the cluster).

        ``env`` is added to this process's environment (minus SLURM_*/launcher variables).
        On timeout the command's process group is killed and ``timed_out`` is set.
        """
        wd = self.ledger.wd
        env = clean_env(
            {
                "SLURM_CONF": str(slurm_conf(wd)),
                "TMPDIR": str(wd / "tmp" / "ctl"),
                **(env or {}),
            }
        )
        full = in_ns(self.layout.ctl_ns, "ctl", argv)
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=wd,
                start_new_session=True,
                text=True,
            )
            [to] = wait_all([p], timeout)
            out.seek(0)
            err.seek(0)
            return Result(
                argv,
                p.returncode,
                out.read(),
                err.read(),
                name="login",
                elapsed=time.monotonic() - t0,
                timed_out=to,
            )

    def srun(
        self,
        argv: Sequence[str],
        nodes: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        srun_args: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> Result:
        """``srun -N<nodes> --ntasks-per-node=1 --label <srun_args> <argv>`` on the login node
        (``nodes``: default all of them); every job is cancelled if it times out.

        Output lines are prefixed ``"<task id>: "`` (see :func:`split_labeled`). Each task
        gets ``env`` (srun exports the caller's environment) and its node's TMPDIR.
        """
        n = self.layout.nodes if nodes is None else nodes
        cmd = ["srun", f"-N{n}", "--ntasks-per-node=1", "--label", *srun_args, *argv]
        r = self.login(cmd, env=env, timeout=timeout)
        if r.timed_out:
            self.cancel_all()
        return r

    def cancel_all(self) -> None:
        """Cancel every job of this (private) cluster."""
        self.login(["scancel", "--user=root"], timeout=30)

    def sbatch(
        self,
        script: Path,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        sbatch_args: Sequence[str] = (),
    ) -> str:
        """Submit ``script`` from the login node; returns the job id.

        Output goes to :meth:`job_output_path` (``<workdir>/out/job-<id>.out``).
        """
        out = self.ledger.wd / "out" / "job-%j.out"
        cmd = ["sbatch", "--parsable", f"--output={out}", *sbatch_args, str(script), *args]
        r = self.login(cmd, env=env, timeout=60)
        if r.returncode != 0:
            raise ClusterError(f"sbatch failed ({r.returncode}): {r.output}")
        return str(r.stdout).strip().split(";")[0]

    def job_output_path(self, jobid: str) -> Path:
        """Where :meth:`sbatch` sends the job's output."""
        return self.ledger.wd / "out" / f"job-{jobid}.out"

    def wait_job(self, jobid: str, timeout: float = 120.0) -> tuple[str, int]:
        """Wait until the job has ended; returns ``(JobState, exit code)``.

        On timeout the job is cancelled and ``("TIMEOUT_HARNESS", -1)`` returned.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.login(["scontrol", "-o", "show", "job", jobid], timeout=30)
            fields = dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)
            state = fields.get("JobState", "")
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                code = fields.get("ExitCode", "0:0").split(":")[0]
                return state, int(code) if code.isdigit() else -1
            time.sleep(0.2)
        self.login(["scancel", jobid], timeout=30)
        return "TIMEOUT_HARNESS", -1

    def node_exec(
        self,
        i: int,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        cwd: Optional[Path] = None,
        delay: float = 0.0,
    ) -> subprocess.Popen[str]:
        """Start ``argv`` on node ``i`` without Slurm (its netns, hostname ``node{i}``).

        ``env`` is added to this process's environment (minus SLURM_*/launcher variables)
        with ``TMPDIR`` set to the node's TMPDIR. The process leads its own session; the
        caller owns the returned Popen (all of it is also killed by teardown).
        ``delay`` seconds: returns at once, but ``argv`` starts only after a ``sleep`` in
        the node's namespace (same process, same session: killing it cancels the start).
        """
        full_env = clean_env({"TMPDIR": str(node_tmpdir(self.ledger.wd, i)), **(env or {})})
        p = subprocess.Popen(
            in_ns(self.layout.node_ns(i), f"node{i}", argv, delay),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            text=True,
        )
        self.ledger.track(p)
        return p

    def run_on_nodes(
        self,
        argv_per_node: Sequence[Sequence[str]],
        env_per_node: Optional[Sequence[Optional[Mapping[str, str]]]] = None,
        timeout: float = 120.0,
        nodes: Optional[Sequence[int]] = None,
        delays: Optional[Sequence[float]] = None,
    ) -> list[Result]:
        """Run ``argv_per_node[k]`` on node ``nodes[k]`` (default ``k``) in parallel.

        Waits for all (killing what still runs after ``timeout``) and returns one
        :class:`Result` per command, in order (``elapsed``: until the last one ended).
        Output is also kept in ``<workdir>/out/run<n>-node<i>.{out,err}``.
        ``delays[k]`` starts command ``k`` that many seconds after the others (see
        :meth:`node_exec`); ``timeout`` counts from the common start, delays included.
        """
        idx = list(nodes) if nodes is not None else list(range(len(argv_per_node)))
        envs = list(env_per_node) if env_per_node is not None else [None] * len(idx)
        waits = list(delays) if delays is not None else [0.0] * len(idx)
        if not len(idx) == len(argv_per_node) == len(envs) == len(waits):
            raise ValueError("argv_per_node, env_per_node, nodes and delays differ in length")
        self._counter += 1
        run = self._counter
        procs = []
        files = []
        t0 = time.monotonic()
        for i, argv, env, delay in zip(idx, argv_per_node, envs, waits):
            base = self.ledger.wd / "out" / f"run{run}-node{i}"
            out, err = open(f"{base}.out", "w+"), open(f"{base}.err", "w+")  # noqa: SIM115
            files.append((out, err))
            p = self.node_exec(i, argv, env, out, err, delay=delay)
            procs.append((f"node{i}", p, list(argv)))
        timed_out = wait_all([p for _, p, _ in procs], timeout)
        elapsed = time.monotonic() - t0
        results = []
        for (name, p, argv), (out, err), to in zip(procs, files, timed_out):
            out.seek(0)
            err.seek(0)
            results.append(
                Result(
                    argv,
                    p.returncode,
                    out.read(),
                    err.read(),
                    name=name,
                    elapsed=elapsed,
                    timed_out=to,
                )
            )
            out.close()
            err.close()
        return results
