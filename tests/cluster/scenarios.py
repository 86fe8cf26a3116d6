"""Building blocks for cluster scenarios: launch commands, result parsing, assertions."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import pytest

from tests.cluster.harness import Cluster, Result, split_labeled, tail
from tests.cluster.system import crash_dump

#: A scenario the matrix runs per release and CI leaves out, for CI's 20 minutes: a variant of
#: one CI runs, or a mechanism CI proves with another scenario (docs/testing.md lists them).
IN_THE_MATRIX = pytest.mark.slow(
    reason="per release in the matrix (scripts/torch-matrix), left out of CI for its time:"
    " TRJSC_SLOW_SCENARIOS=1 runs it"
)
#: torchrun_jsc's own mechanism, the same on every release (the matrix runs it on each): in CI
#: on the first interpreter only (scripts/run-tests).
FIRST_ONLY = pytest.mark.first_interpreter_in_ci

TRAIN = Path(__file__).resolve().parent / "jobs" / "train.py"
#: The same result line through Lightning Fabric (a DDP step, ``fabric.all_reduce``).
TRAIN_FABRIC = TRAIN.with_name("fabric_train.py")
RESULT_TAG = "TRJSC_RESULT"


@dataclass(frozen=True)
class RankResult:
    """One ``TRJSC_RESULT`` line of jobs/train.py."""

    host: str
    rank: int
    world: int
    group_rank: str
    allreduce: int
    expect: int
    master_addr: str
    master_port: str
    fields: Mapping[str, str]

    @property
    def ok(self) -> bool:
        """True if the all_reduce gave the expected sum."""
        return self.allreduce == self.expect


def parse_results(text: str) -> list[RankResult]:
    """All ``TRJSC_RESULT`` lines in ``text`` (srun ``--label`` prefixes are fine)."""
    out = []
    for line in text.splitlines():
        pos = line.find(RESULT_TAG + " ")
        if pos < 0:
            continue
        f = dict(t.split("=", 1) for t in line[pos:].split()[1:] if "=" in t)
        out.append(
            RankResult(
                host=f.get("host", "?"),
                rank=int(f.get("rank", -1)),
                world=int(f.get("world", -1)),
                group_rank=f.get("group_rank", ""),
                allreduce=int(f.get("allreduce", -1)),
                expect=int(f.get("expect", -2)),
                master_addr=f.get("master_addr", ""),
                master_port=f.get("master_port", ""),
                fields=f,
            )
        )
    return out


Outputs = Union[Result, Sequence[Result], Mapping[str, str]]


def outputs_by_node(outputs: Outputs) -> dict[str, str]:
    """``{name: output}`` from an srun Result (split by task label), node Results or a dict."""
    if isinstance(outputs, Mapping):
        return dict(outputs)
    if isinstance(outputs, Result):
        by_task = split_labeled(outputs.output)
        unlabeled = "\n".join(ln for ln in outputs.output.splitlines() if not split_labeled(ln))
        named = {f"task{k}": v for k, v in by_task.items()}
        if unlabeled.strip():
            named[outputs.name] = unlabeled
        return named
    return {r.name: r.output for r in outputs}


def describe(outputs: Outputs, lines: int = 25) -> str:
    """Return codes and the tail of each node's output, for assertion messages."""
    parts = []
    if isinstance(outputs, Result):
        parts.append(
            f"{outputs.name}: rc={outputs.returncode} timed_out={outputs.timed_out} "
            f"elapsed={outputs.elapsed:.1f}s"
        )
    elif not isinstance(outputs, Mapping):
        parts += [f"{r.name}: rc={r.returncode} timed_out={r.timed_out}" for r in outputs]
    for name, text in outputs_by_node(outputs).items():
        dump = crash_dump(text)
        if dump:
            parts.append(f"----- {name} (its crash: the header and the crashed thread)\n{dump}")
        parts.append(f"----- {name} (last {lines} lines)\n{tail(text, lines)}")
    return "\n".join(parts)


def all_text(outputs: Outputs) -> str:
    """Everything the scenario printed, concatenated."""
    return "\n".join(outputs_by_node(outputs).values())


def returncodes(outputs: Union[Result, Sequence[Result]]) -> list[int]:
    """Return code(s) of one or several Results."""
    if isinstance(outputs, Result):
        return [outputs.returncode]
    return [r.returncode for r in outputs]


def assert_training_ok(
    cluster: Cluster,
    outputs: Union[Result, Sequence[Result]],
    world: int,
    master_addr: Optional[str] = None,
) -> list[RankResult]:
    """Assert a successful run of jobs/train.py with ``world`` ranks.

    Checks: every command exited 0, ranks 0..world-1 reported exactly once with the right
    all_reduce sum, all agree on MASTER_ADDR/PORT, and MASTER_ADDR is a name or address on
    the IB network (or equals ``master_addr`` if given). Messages include each node's tail.
    """
    results = parse_results(all_text(outputs))
    ctx = "\n" + describe(outputs)
    codes = returncodes(outputs)
    assert all(c == 0 for c in codes), f"non-zero exit codes {codes}{ctx}"
    ranks = sorted(r.rank for r in results)
    assert ranks == list(range(world)), f"expected ranks 0..{world - 1}, got {ranks}{ctx}"
    bad = [r for r in results if not r.ok or r.world != world]
    assert not bad, f"wrong all_reduce/world: {bad}{ctx}"
    addrs = {(r.master_addr, r.master_port) for r in results}
    assert len(addrs) == 1, f"ranks disagree on MASTER_ADDR/PORT: {addrs}{ctx}"
    addr = results[0].master_addr
    if master_addr is not None:
        assert addr == master_addr, f"MASTER_ADDR={addr}, expected {master_addr}{ctx}"
    assert addr in cluster.ib_names(), f"MASTER_ADDR={addr} is not on the IB network{ctx}"
    return results


def assert_failed(
    outputs: Union[Result, Sequence[Result]], expect_text: str, min_count: int = 1
) -> None:
    """Assert a failed run: some non-zero exit and ``expect_text`` in >= min_count outputs."""
    codes = returncodes(outputs)
    ctx = "\n" + describe(outputs)
    assert any(c != 0 for c in codes), f"expected a failure, exit codes {codes}{ctx}"
    hits = sum(expect_text in t for t in outputs_by_node(outputs).values())
    assert hits >= min_count, f"{expect_text!r} in {hits} outputs, expected >= {min_count}{ctx}"


def torchrun_argv(
    python: Union[str, Path],
    nnodes: Union[int, str],
    endpoint: str,
    rdzv_conf: str = "join_timeout=60,read_timeout=60",
    extra: Sequence[str] = (),
    script: Path = TRAIN,
    module: str = "torch.distributed.run",
) -> list[str]:
    """``python -m <module> --nnodes=N --nproc_per_node=1 --rdzv_backend=c10d ... train.py``.

    Use ``module="torchrun_jsc"`` for the project's launcher.
    """
    return [
        str(python),
        "-m",
        module,
        f"--nnodes={nnodes}",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        "--rdzv_id=1",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_conf={rdzv_conf}",
        *extra,
        str(script),
    ]


_SUBST = (
    'id=${SLURM_NODEID:?not in a Slurm step}; h=$(hostname); first=0; [ "$id" = 0 ] && first=1; '
    'a=("$@"); a=("${a[@]//@NODEID@/$id}"); a=("${a[@]//@HOSTNAME@/$h}"); '
    'exec "${a[@]//@IS_FIRST@/$first}"'
)


def on_each_node(argv: Sequence[str]) -> list[str]:
    """Wrap argv for srun so placeholders are filled in per node before exec.

    ``@NODEID@`` -> SLURM_NODEID, ``@HOSTNAME@`` -> hostname (node2), ``@IS_FIRST@`` -> 1 on
    SLURM_NODEID 0 else 0. Example: ``"--local_addr=@HOSTNAME@i"``.
    """
    return ["bash", "-c", _SUBST, "trjsc-node", *argv]


class Job:
    """One agent per node started with ``node_exec`` (no Slurm), outputs drained by threads so
    that a scenario can wait for a line, inject a fault and time how the others end."""

    def __init__(
        self,
        cluster: Cluster,
        argv: Sequence[str],
        envs: Sequence[Mapping[str, str]],
        nodes: Optional[Sequence[int]] = None,
        delays: Optional[Sequence[float]] = None,
    ) -> None:
        import threading

        self.cluster = cluster
        self.nodes = list(nodes) if nodes is not None else list(range(len(envs)))
        self.text: dict[int, list[str]] = {i: [] for i in self.nodes}
        self.procs = {}
        waits = list(delays) if delays is not None else [0.0] * len(self.nodes)
        for i, env, delay in zip(self.nodes, envs, waits):
            proc = cluster.node_exec(i, list(argv), env=env, delay=delay)
            self.procs[i] = proc
            for stream in (proc.stdout, proc.stderr):
                threading.Thread(target=self._drain, args=(i, stream), daemon=True).start()

    def _drain(self, i: int, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.text[i].append(line)

    def output(self, i: int) -> str:
        """Everything node ``i``'s agent printed so far."""
        return "".join(self.text[i])

    def wait_for(
        self, word: str, nodes: Optional[Sequence[int]] = None, limit: float = 150
    ) -> None:
        """Until ``word`` appeared in the output of every node in ``nodes``."""
        import time

        wanted = list(nodes) if nodes is not None else self.nodes
        deadline = time.monotonic() + limit
        while not all(word in self.output(i) for i in wanted):
            assert time.monotonic() < deadline, f"{word!r} not seen on all of {wanted}\n{self}"
            time.sleep(0.2)

    def wait_exit(self, nodes: Sequence[int], limit: float) -> float:
        """Until the agents on ``nodes`` ended (at most ``limit`` s); the seconds it took."""
        import time

        started = time.monotonic()
        for i in nodes:
            left = max(0.1, limit - (time.monotonic() - started))
            try:
                self.procs[i].wait(timeout=left)
            except Exception:
                break
        return time.monotonic() - started

    def left_running(self, nodes: Sequence[int]) -> dict[int, list[int]]:
        """Job processes still alive in those nodes' namespaces (zombies count as gone)."""
        found = {}
        for i in nodes:
            pids = [p for p in self.cluster._node_procs(i) if _running(p)]
            if pids:
                found[i] = pids
        return found

    def wait_gone(self, nodes: Sequence[int], limit: float) -> dict[int, list[str]]:
        """Until no job process is left on ``nodes`` (at most ``limit`` s); what is left, as
        command lines."""
        import time

        deadline = time.monotonic() + max(limit, 0.0)
        while self.left_running(nodes) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {
            i: [f"{pid}: {_command(pid)}" for pid in pids]
            for i, pids in self.left_running(nodes).items()
        }

    def stop(self) -> None:
        """Thaw, kill and reap everything this job started (the scenario's own cleanup)."""
        import signal as signals

        for i in self.nodes:
            self.cluster.thaw_node(i)
            self.cluster.signal_node(i, signals.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)

    def __str__(self) -> str:
        parts = []
        for i in self.nodes:
            code = self.procs[i].poll()
            parts.append(f"----- node{i} (rc={code}, last 60 lines)\n{tail(self.output(i), 60)}")
        return "\n".join(parts)


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def busy(cores: int) -> list[subprocess.Popen[bytes]]:
    """Fully load ``cores`` CPUs (busy loops; no network)."""
    loop = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(cores)]
