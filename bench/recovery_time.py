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
was the spare). Needs root. Prints; ``--plot`` writes a PNG (matplotlib, the ``bench`` extra);
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
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.cluster.harness import Cluster, free_prefix  # noqa: E402
from tests.cluster.scenarios import Job  # noqa: E402
from tests.cluster.test_recovery import (  # noqa: E402
    command,
    envs,
    first_step_after,
    spare_of,
    wait_for_step,
)

from record import record  # noqa: E402

PLOT = ROOT / "docs" / "recovery-time.png"
#: The goal: at most the peer timeout and this much from the fault to training again.
GOAL_EXTRA = 30.0


def one_round(cluster: Cluster, size: int, peer_timeout: float, host: bool = False) -> float:
    """One job on every node of ``cluster`` (``size`` train, one spare): seconds from the
    freeze (of node 0 when ``host``) to the first step of the new round."""
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
        wait_for_step(job, trained[-1], 12, limit=300)
        groups = job.output(watched).count("TRJSC_RESUMED ")
        cluster.freeze_node(frozen)
        return first_step_after(job, watched, groups, peer_timeout + 240)
    finally:
        if frozen is not None:
            cluster.thaw_node(frozen)
        job.stop()


#: Every round's figure, by (training nodes, peer timeout).
Found = Dict[Tuple[int, float], List[float]]


def measure(sizes: List[int], timeouts: List[float], rounds: int, host: bool = False) -> Found:
    """Every round's figure, by (size, peer timeout)."""
    found: Found = {}
    for size in sizes:
        cluster = Cluster(nodes=size + 1, prefix=free_prefix("trjb")).up(timeout=180)
        try:
            for timeout in timeouts:
                for r in range(rounds):
                    took = one_round(cluster, size, timeout, host)
                    found.setdefault((size, timeout), []).append(took)
                    print(f"{size} nodes, peer timeout {timeout:g} s, round {r + 1}: {took:.1f} s")
        finally:
            cluster.down()
    return found


def table(found: Found) -> str:
    lines = [
        "| training nodes (+1 spare) | `TORCHRUN_JSC_PEER_TIMEOUT` | fault → first step, median |"
        " slowest | rounds | goal (timeout + 30 s) |",
        "|---|---|---|---|---|---|",
    ]
    for (size, timeout), times in sorted(found.items()):
        goal = timeout + GOAL_EXTRA
        ok = "met" if max(times) <= goal else "**missed**"
        lines.append(
            f"| {size} | {timeout:g} s | {statistics.median(times):.1f} s | {max(times):.1f} s"
            f" | {len(times)} | {goal:g} s: {ok} |"
        )
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
            [statistics.median(found[(s, timeout)]) for s in sizes],
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
    body = table(found)
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
            "\n\nThe machine's two cores run every node of the cluster; the 16-node cluster's"
            " agents and workers share them with 17 of each.\n\n![fault to first step by job"
            " size](recovery-time.png)"
        )
        record("recovery-time", body, ROOT / "docs" / "benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
