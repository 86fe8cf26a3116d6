"""The resuming workload's jobs on the namespace cluster, for the recovery and requeue
scenarios and the recovery benchmark: how they are started (5 agents, one maybe a spare, the
host maybe late), what each node's last worker group printed, and waits on the new rounds.
The workload (``jobs/resume.py``) checkpoints every 5 steps and resumes."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tests.cluster.harness import Cluster
from tests.cluster.scenarios import Job, torchrun_argv
from torchrun_jsc.runtime.events import entry
from torchrun_jsc.runtime.events.entry import Entry

SLOW = os.environ.get("TRJSC_SLOW_SCENARIOS") == "1"
RESUME = Path(__file__).resolve().parent / "jobs" / "resume.py"
#: On a node's PYTHONPATH, with TRJSC_LATE_JOIN=<s>: its agent joins the first round late.
LATE_JOIN = Path(__file__).resolve().parent / "jobs" / "late_join"
#: The peer timeout of these scenarios (the smallest accepted).
PEER_TIMEOUT = 10.0
STEPS = 80
#: The new round must train within the peer timeout and this much after the fault (issue 21).
TO_FIRST_STEP = PEER_TIMEOUT + 60.0


def every_node_exited(job: Job, nodes: Iterable[int], code: int, why: str = "") -> None:
    """Each of ``nodes`` ended with exit code ``code`` (else their codes, ``why`` and what every
    node said)."""
    nodes = list(nodes)
    codes = {i: job.procs[i].returncode for i in nodes}
    assert codes == dict.fromkeys(nodes, code), f"{codes}{why}\n{said(job)}"


def every_node_failed(job: Job, nodes: Iterable[int]) -> None:
    """Each of ``nodes`` ended, with an exit code other than 0."""
    codes = {i: job.procs[i].returncode for i in nodes}
    assert all(c not in (None, 0) for c in codes.values()), f"{codes}\n{said(job)}"


def said(job: Job) -> str:
    """Every node's own lines (torchrun_jsc's, torch's errors, where each worker group
    resumed), for failure messages: the steps would hide them."""
    keep = ("torchrun_jsc", "TRJSC_RESUMED", "TRJSC_DONE", "Error", "error")
    parts = []
    for i in job.nodes:
        mine = [ln for ln in job.output(i).splitlines() if any(k in ln for k in keep)]
        parts.append(f"----- node{i} (rc={job.procs[i].poll()})\n" + "\n".join(mine[-40:]))
    return "\n".join(parts)


class Run(NamedTuple):
    """What one node's workers printed in their last worker group."""

    rank: int
    world: int
    resumed_from: int
    steps: Dict[int, bool]  # step -> its sum was right
    done_ok: bool


def last_run(text: str) -> Run:
    """The node's last worker group, from its output."""
    starts = [m.start() for m in re.finditer(r"^TRJSC_RESUMED ", text, re.M)]
    assert starts, text[-3000:]
    tail = text[starts[-1] :]
    head = re.match(r"TRJSC_RESUMED host=\S+ rank=(\d+) world=(\d+) from=(\d+)", tail)
    assert head, tail[:500]
    steps = {
        int(m.group(1)): m.group(2) == m.group(3)
        for m in re.finditer(r"^TRJSC_STEP .* step=(\d+) sum=(\d+) expect=(\d+)", tail, re.M)
    }
    done = re.search(r"^TRJSC_DONE .* acc=(\d+) expect=(\d+)", tail, re.M)
    return Run(
        int(head.group(1)),
        int(head.group(2)),
        int(head.group(3)),
        steps,
        bool(done) and done.group(1) == done.group(2),  # type: ignore[union-attr]
    )


def assert_resumed_and_completed(job: Job, nodes: Sequence[int], world: int) -> Dict[int, Run]:
    """Every node's last worker group: ``world`` ranks in node order, resumed from a
    checkpoint after step 0, every later step right, the total right."""
    runs = {i: last_run(job.output(i)) for i in nodes}
    for i, run in runs.items():
        assert run.world == world, f"node{i}: {run}\n{job}"
        assert run.resumed_from > 0 and run.resumed_from % 5 == 0, f"node{i}: {run}\n{job}"
        wanted = set(range(run.resumed_from + 1, STEPS + 1))
        assert set(run.steps) == wanted and all(run.steps.values()), f"node{i}: {run}\n{job}"
        assert run.done_ok, f"node{i}: {run}\n{job}"
    assert [runs[i].rank for i in sorted(nodes)] == list(range(world)), f"{runs}\n{job}"
    assert len({r.resumed_from for r in runs.values()}) == 1, f"{runs}\n{job}"
    return runs


def command(cluster: Cluster, nnodes: str, restarts: int, conf: str = "") -> List[str]:
    rdzv = "join_timeout=120,read_timeout=60" + (f",{conf}" if conf else "")
    return torchrun_argv(
        cluster.python,
        nnodes,
        "node0i:29500",
        rdzv,
        (f"--max_restarts={restarts}",),
        script=RESUME,
        module="torchrun_jsc",
    )


def envs(cluster: Cluster, n: int, name: str) -> List[Dict[str, str]]:
    assert cluster.workdir is not None
    ckpt = cluster.workdir / f"{name}.ckpt"
    ckpt.unlink(missing_ok=True)
    log = events_path(cluster, name)
    log.unlink(missing_ok=True)
    base = {
        "TRJSC_CKPT": str(ckpt),
        "TRJSC_STEPS": str(STEPS),
        "TORCHRUN_JSC_PEER_TIMEOUT": f"{PEER_TIMEOUT:g}",
        "TORCHRUN_JSC_EVENTS": str(log),
    }
    return [{"TORCHRUN_JSC_NODE_RANK": str(i), **base} for i in range(n)]


def events_path(cluster: Cluster, name: str) -> Path:
    """The event log of the job ``name`` (the agents run outside Slurm: it is set)."""
    assert cluster.workdir is not None
    return cluster.workdir / f"{name}.events.jsonl"


def events_of(cluster: Cluster, name: str) -> List[Entry]:
    """The events the job ``name`` logged, every line readable, in time order."""
    lines = events_path(cluster, name).read_text().splitlines()
    found = entry.read(lines)
    assert found.skipped == 0, "\n".join(lines)
    assert [e.time for e in found.entries] == sorted(e.time for e in found.entries)
    return list(found.entries)


def report(cluster: Cluster, name: str) -> Tuple[str, Tuple[int, int]]:
    """``python -m torchrun_jsc.report`` on the job ``name``'s event log, with its timeline
    drawn: what it printed, and the picture's width and height (pixels)."""
    assert cluster.workdir is not None
    picture = cluster.workdir / f"{name}.timeline.png"
    log = str(events_path(cluster, name))
    done = subprocess.run(
        [sys.executable, "-m", "torchrun_jsc.report", log, "--plot", str(picture)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    width, height = struct.unpack(">II", data[16:24])
    return done.stdout, (width, height)


def named(index: int) -> Dict[str, Any]:
    """Node ``index`` as the event log names it."""
    return entry.node(f"node{index}", index)


def wait_for_step(job: Job, node: int, step: int, limit: float = 150.0) -> None:
    job.wait_for(f"step={step} ", nodes=[node], limit=limit)


def steps_into_round(job: Job, node: int, rounds: int, steps: int, limit: float = 60.0) -> int:
    """Until node ``node``'s ``rounds``-th worker group has done ``steps`` steps; the step it
    resumed from."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        parts = job.output(node).split("TRJSC_RESUMED ")
        if len(parts) > rounds and parts[-1].count("TRJSC_STEP ") >= steps:
            return last_run(job.output(node)).resumed_from
        time.sleep(0.1)
    raise AssertionError(f"node{node}: no {steps} steps in round {rounds}\n{said(job)}")


def trains_anew(text: str, resumed_before: int) -> bool:
    """Whether ``text`` has a step of a worker group newer than its ``resumed_before``-th."""
    parts = text.split("TRJSC_RESUMED ")
    return len(parts) > resumed_before + 1 and "TRJSC_STEP " in parts[-1]


def first_step_after(job: Job, node: int, resumed_before: int, limit: float) -> float:
    """Seconds until node ``node`` printed a step of a worker group newer than its
    ``resumed_before``-th (the new round trains)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if trains_anew(job.output(node), resumed_before):
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"node{node} did not train in a new round within {limit:.0f} s\n{job}")


def spare_of(job: Job, limit: float = 150.0) -> int:
    """The node that said it waits as a spare (whichever came last to the first round, never
    node0, the rendezvous host)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        found = [i for i in job.nodes if "torchrun_jsc: spare: the job's" in job.output(i)]
        if found:
            assert len(found) == 1, f"{found}\n{job}"
            assert found[0] != 0, f"node0, the rendezvous host, waits as the spare\n{job}"
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no node said it is a spare within {limit:.0f} s\n{job}")


def late_host(env: Dict[str, str], seconds: float) -> Dict[str, str]:
    """``env`` for node0, the rendezvous host, whose agent joins the first round ``seconds``
    late (its store up, the other nodes joining first)."""
    path = os.pathsep.join(p for p in (str(LATE_JOIN), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "TRJSC_LATE_JOIN": f"{seconds:g}"}


def with_a_spare(
    cluster: Cluster,
    jobs: List[Job],
    name: str,
    nnodes: str = "4",
    conf: str = "",
    host_late: float = 0.0,
    argv: Optional[Sequence[str]] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Tuple[Job, int, List[int]]:
    """A job on all 5 nodes of ``cluster`` for ``--nnodes`` up to 4 and 3 restarts: the job, its
    spare (whichever came last to the first round, never the host) and the nodes of that round.
    ``host_late``: node0, the rendezvous host, joins the first round that many seconds late.
    ``argv``: another launch of jobs/resume.py than torchrun_jsc's; ``env``: added on every
    node."""
    node_envs = [{**e, **(env or {})} for e in envs(cluster, 5, name)]
    if host_late:
        node_envs[0] = late_host(node_envs[0], host_late)
    job = Job(cluster, argv or command(cluster, nnodes, 3, conf), node_envs)
    jobs.append(job)
    if host_late:
        job.wait_for("TRJSC_LATE_JOIN joining", nodes=[0])
    spare = spare_of(job)
    return job, spare, [i for i in range(5) if i != spare]


def until_every_node_said(job: Job, nodes: Sequence[int], line: str, limit: float = 30.0) -> None:
    """Until every one of ``nodes`` said ``line`` (at most ``limit`` s)."""
    waited = time.monotonic()
    while not all(line in job.output(i) for i in nodes):
        assert time.monotonic() - waited < limit, f"{line!r} not on all of {nodes}\n{said(job)}"
        time.sleep(0.2)


def spare_replaces_a_frozen_node(
    cluster: Cluster, job: Job, spare: int, first: Sequence[int], label: str
) -> int:
    """Freeze the last training node of the first round but the rendezvous host (12 steps in),
    then: the spare's new round trains within :data:`TO_FIRST_STEP`, every other training node
    says restart 1 with the spare in its place, the spare says it took the place; the node is
    thawed. Returns the frozen node."""
    frozen = max(i for i in first if i != 0)
    wait_for_step(job, 0, 12)
    cluster.freeze_node(frozen)
    to_step = first_step_after(job, spare, 0, TO_FIRST_STEP + 30)
    print(f"{label}: the freeze to the new round's first step {to_step:.1f} s")
    line = (
        f"restart 1 of 3: node{frozen} (node rank {frozen}) lost; going on with node{spare}"
        f" (node rank {spare}) in its place"
    )
    until_every_node_said(job, [i for i in first if i != frozen], line)
    joined = "torchrun_jsc: spare: this node takes a lost node's place (restart 1 of 3; 4 nodes)"
    assert joined in job.output(spare), said(job)
    cluster.thaw_node(frozen)
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    return frozen
