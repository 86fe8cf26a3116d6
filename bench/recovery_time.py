"""Benchmark: how long a job with a spare takes from a lost node to training again, by job size.

Per size N (default 4, 8 and 16 training nodes) a namespace cluster of N + 1 nodes runs
``--nnodes=N --max_restarts=3`` with ``tests/cluster/jobs/resume.py`` (a checkpoint every 5
steps): one agent waits as a spare. Once the job trains, the highest-ranked training node that
is not the rendezvous host is frozen (SIGSTOP, a hung node); the figure is the time from the
freeze to the spare's first training step in the new round, which includes finding the node
lost (``TORCHRUN_JSC_PEER_TIMEOUT``), torch's new rendezvous round, the workers' start and their
process group. Per size and peer timeout (default 60 s and 10 s), ``--rounds`` runs; the
median and the slowest are printed, with the goal of issue 21: at most the peer timeout + 30 s.
With ``--fault host`` the rendezvous host (node 0) is frozen instead: every other node starts
its agent again and the next node in node-rank order hosts (failover); the figure is the time
to the first training step of the new round on the node that watched (the spare, unless node 0
was the spare). Each round also notes when each phase ended, seconds after the fault: a
survivor declares the node lost (``restarting the workers without it``; not with ``--fault
host``), the watched node joins the new round, its worker has imported torch
(``TRJSC_UP``), its process group is up and the checkpoint read (``TRJSC_RESUMED``), its
first step; and how busy the machine's cores were from the fault to that step (from
``/proc/stat``). Needs root. Prints; ``--plot`` writes a PNG (matplotlib, the ``bench`` extra);
``--record`` writes the table into docs/benchmarks.md (section recovery-time, or
failover-time for ``--fault host``) and the plot to docs/recovery-time.png (not for
``--fault host``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.cluster.harness import Cluster, free_prefix  # noqa: E402
from tests.cluster.recovery_jobs import (  # noqa: E402
    command,
    envs,
    spare_of,
    trains_anew,
    wait_for_step,
)
from tests.cluster.scenarios import Job  # noqa: E402

from record import record  # noqa: E402

PLOT = ROOT / "docs" / "recovery-time.png"
#: The goal: at most the peer timeout and this much from the fault to training again.
GOAL_EXTRA = 30.0


#: The phases of a recovery, each by the line that ends it: (name, on the watched node or a
#: survivor, the line).
PHASES = (
    ("lost", False, "; restarting the workers without it"),
    ("joined", True, "torchrun_jsc: spare: this node takes a lost node's place"),
    ("torch imported", True, "TRJSC_UP "),
    ("process group", True, "TRJSC_RESUMED "),
)
#: The last phase: the watched node's first step in a new worker group.
FIRST_STEP = "first step"


class Round(NamedTuple):
    """One round: seconds from the fault to the first step, to each phase's end (None: not
    seen), and the share of the machine's cores busy meanwhile."""

    took: float
    phases: Dict[str, Optional[float]]
    busy: float


def _busy() -> Tuple[int, int]:
    """The machine's busy and total jiffies so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def _phases(
    job: Job, watched: int, survivor: int, groups: int, limit: float
) -> Dict[str, Optional[float]]:
    """Seconds from now to each phase's end: the first of its lines after the ones already
    there; the first step, once the watched node trains in a worker group newer than its
    ``groups``-th. AssertionError when that takes longer than ``limit``."""
    before = {
        name: job.output(watched if on_watched else survivor).count(line)
        for name, on_watched, line in PHASES
    }
    found: Dict[str, Optional[float]] = dict.fromkeys([*before, FIRST_STEP])
    started = time.monotonic()
    while found[FIRST_STEP] is None:
        assert time.monotonic() - started < limit, f"node{watched} did not train again\n{job}"
        texts = {True: job.output(watched), False: job.output(survivor)}
        now = time.monotonic() - started
        for name, on_watched, line in PHASES:
            if found[name] is None and texts[on_watched].count(line) > before[name]:
                found[name] = now
        if trains_anew(texts[True], groups):
            found[FIRST_STEP] = now
        time.sleep(0.1)
    return found


def one_round(cluster: Cluster, size: int, peer_timeout: float, host: bool = False) -> Round:
    """One job on every node of ``cluster`` (``size`` train, one spare): seconds from the
    freeze (of node 0 when ``host``) to the first step of the new round, and its phases."""
    node_envs = envs(cluster, size + 1, f"bench-{size}")
    node_envs = [
        {**e, "TORCHRUN_JSC_PEER_TIMEOUT": f"{peer_timeout:g}", "TRJSC_STEPS": "100000"}
        for e in node_envs
    ]
    job = Job(cluster, command(cluster, str(size), 3), node_envs)
    frozen: Optional[int] = None
    try:
        spare = spare_of(job, limit=300)
        trained = [i for i in range(size + 1) if i != spare]
        frozen = 0 if host else max(i for i in trained if i != 0)
        watched = spare if spare != frozen else min(i for i in trained if i != frozen)
        survivor = min(i for i in trained if i not in (frozen, watched))
        wait_for_step(job, trained[-1], 12, limit=300)
        groups = job.output(watched).count("TRJSC_RESUMED ")
        busy, total = _busy()
        cluster.freeze_node(frozen)
        phases = _phases(job, watched, survivor, groups, peer_timeout + 240)
        busy_after, total_after = _busy()
        share = (busy_after - busy) / max(total_after - total, 1)
        return Round(phases[FIRST_STEP] or 0.0, phases, share)
    finally:
        if frozen is not None:
            cluster.thaw_node(frozen)
        job.stop()


#: Every round, by (training nodes, peer timeout).
Found = Dict[Tuple[int, float], List[Round]]


def measure(sizes: List[int], timeouts: List[float], rounds: int, host: bool = False) -> Found:
    """Every round's figure, by (size, peer timeout)."""
    found: Found = {}
    for size in sizes:
        cluster = Cluster(nodes=size + 1, prefix=free_prefix("trjb")).up(timeout=180)
        try:
            for timeout in timeouts:
                for r in range(rounds):
                    done = one_round(cluster, size, timeout, host)
                    found.setdefault((size, timeout), []).append(done)
                    ends = ", ".join(
                        f"{name} {'-' if at is None else f'{at:.1f}'}"
                        for name, at in done.phases.items()
                    )
                    print(
                        f"{size} nodes, peer timeout {timeout:g} s, round {r + 1}:"
                        f" {done.took:.1f} s ({ends}; cores {done.busy:.0%} busy)"
                    )
        finally:
            cluster.down()
    return found


def table(found: Found) -> str:
    lines = [
        "| training nodes (+1 spare) | `TORCHRUN_JSC_PEER_TIMEOUT` | fault → first step, median |"
        " slowest | rounds | goal (timeout + 30 s) |",
        "|---|---|---|---|---|---|",
    ]
    for (size, timeout), rounds in sorted(found.items()):
        times = [r.took for r in rounds]
        goal = timeout + GOAL_EXTRA
        ok = "met" if max(times) <= goal else "**missed**"
        lines.append(
            f"| {size} | {timeout:g} s | {statistics.median(times):.1f} s | {max(times):.1f} s"
            f" | {len(times)} | {goal:g} s: {ok} |"
        )
    return "\n".join(lines)


def phase_table(found: Found) -> str:
    """The phases' ends (medians, seconds after the fault) and the cores' busy share."""
    names = [*(name for name, _, _ in PHASES), FIRST_STEP]
    lines = [
        "| training nodes | timeout | " + " | ".join(names) + " | cores busy |",
        "|---|---|" + "---|" * (len(names) + 1),
    ]
    for (size, timeout), rounds in sorted(found.items()):
        cells = []
        for name in names:
            seen = [r.phases[name] for r in rounds if r.phases[name] is not None]
            cells.append(f"{statistics.median(seen):.1f}" if seen else "-")  # type: ignore[type-var]
        busy = statistics.median(r.busy for r in rounds)
        lines.append(f"| {size} | {timeout:g} s | " + " | ".join(cells) + f" | {busy:.0%} |")
    return "\n".join(lines)


def plot(found: Found, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for timeout in sorted({t for _, t in found}):
        sizes = sorted(s for s, t in found if t == timeout)
        ax.plot(
            sizes,
            [statistics.median(r.took for r in found[(s, timeout)]) for s in sizes],
            "o-",
            label=f"peer timeout {timeout:g} s",
        )
        ax.axhline(timeout + GOAL_EXTRA, linestyle=":", color="grey")
    ax.set_xlabel("training nodes (one spare more)")
    ax.set_ylabel("fault → first step of the new round (s)")
    ax.set_xticks(sorted({s for s, _ in found}))
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title("A frozen node replaced by the spare (dotted: the goal)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--timeouts", type=float, nargs="+", default=[60.0, 10.0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--fault", choices=("node", "host"), default="node")
    args = ap.parse_args()
    started = time.monotonic()
    host = args.fault == "host"
    found = measure(args.sizes, args.timeouts, args.rounds, host)
    body = (
        table(found)
        + "\n\nEach phase's end, seconds after the fault (medians):\n\n"
        + phase_table(found)
    )
    print(body)
    print(f"(took {time.monotonic() - started:.0f} s)")
    if host:
        if args.record:
            what = (
                "\n\nThe rendezvous host (node 0) frozen: every other node starts its agent"
                " again and the next node in node-rank order hosts the next round (failover)."
                f" `bench/recovery_time.py --fault host --sizes {' '.join(map(str, args.sizes))}"
                f" --timeouts {' '.join(f'{t:g}' for t in args.timeouts)}`."
            )
            record("failover-time", body + what, ROOT / "docs" / "benchmarks.md")
        return 0
    if args.plot or args.record:
        plot(found, PLOT)
    if args.record:
        body += (
            "\n\nA frozen training node (not the host) replaced by the spare. The phases end"
            " when their line appears: lost (a survivor: `restarting the workers without it`;"
            " with the 60 s timeout torch's keep-alives re-form the round first, so no such"
            " line), joined (the spare: `takes a lost node's place`), torch imported (its"
            " worker), process group (with the checkpoint read), first step. Cores busy: the"
            " share of the machine's two cores in use from the fault to the first step; they"
            " run every node of the cluster (at 16 nodes, 17 agents and 16 workers).\n\n"
            "![fault to first step by job size](recovery-time.png)"
        )
        record("recovery-time", body, ROOT / "docs" / "benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
