"""Benchmark: where the time of a multi-node launch on the namespace cluster goes, torchrun_jsc
vs a hand-fixed torchrun, phase by phase (the launches of bench/cluster_launch.py).

Every agent and worker on every node runs under bench/phase_probe.py, which stamps the wall
clock at the end of each phase into a file of its own; a bash line stamps the moment the task
is exec'd. Per launch, each phase is read two ways: when the last node got there (seconds from
`srun`'s start: the launch waits for the slowest node) and how long the phase took on a node
(median over the nodes). Per size, paired rounds in alternating order; each figure is the
median over the rounds, and the paired difference the median of torchrun_jsc - hand-fixed per
round. Needs root. Prints the figures; with --record writes them into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.cluster.harness import Cluster, free_prefix  # noqa: E402
from tests.cluster.scenarios import TRAIN, parse_results  # noqa: E402

from cluster_launch import FALSE_ALARMS, argv_for  # noqa: E402
from phase_probe import ENV  # noqa: E402
from record import record  # noqa: E402

PROBE = ROOT / "bench" / "phase_probe.py"
#: The task's first act: stamp the wall clock, then become the launch's own command.
STAMP = (
    'printf "exec %s\\n" "$EPOCHREALTIME" > "$TRJSC_BENCH_PHASES/$HOSTNAME-exec-$$.txt"; exec "$@"'
)

#: The phases in the order a launch passes them: (stamp, what ends with it).
PHASES: Tuple[Tuple[str, str], ...] = (
    ("exec", "task exec'd (srun, slurmd, slurmstepd)"),
    ("py_start", "agent's interpreter up"),
    ("torch_imported", "`import torch`"),
    ("planned", "torchrun_jsc: request, facts, plan (hand-fixed: nothing)"),
    ("patched", "torchrun_jsc: patches installed (hand-fixed: nothing)"),
    ("torch_main", "`import torch.distributed.run`; torch's main called"),
    ("agent_run", "rendezvous handler and store made, agent starts"),
    ("rdzv_joined", "torch's rendezvous round complete (all nodes)"),
    ("ranks_assigned", "torch: worker ranks assigned (a store exchange of all nodes)"),
    ("rdzv_done", "torchrun_jsc: its job watch joins the round (hand-fixed: nothing)"),
    ("workers_started", "workers started"),
    ("worker_start", "worker's interpreter up"),
    ("result", "worker: import torch, process group, all_reduce, TRJSC_RESULT"),
    ("worker_end", "worker's script returned"),
    ("workers_ended", "torch's monitor sees the workers ended"),
    ("barrier_done", "exit barrier passed (all nodes)"),
    ("agent_run_done", "agent's shutdown"),
    ("launch_agent_done", "rendezvous handler shut down"),
    ("main_returned", "torch's main returned"),
    ("atexit_begin", "non-daemon threads joined"),
    ("atexit_end", "exit handlers (torchrun_jsc: end of the job watch)"),
)
PHASE_NAMES = [p for p, _ in PHASES]
SIDES = ("hand", "torchrun_jsc")

Times = Dict[str, Dict[str, float]]  # host -> stamp -> value


def probed(argv: List[str]) -> List[str]:
    """``argv`` (from cluster_launch.argv_for) with the agent and the worker under the probe."""
    i = argv.index("-m")
    out = [*argv[:i], str(PROBE), "agent", argv[i + 1], *argv[i + 2 :]]
    if out[-1] != str(TRAIN):
        raise SystemExit(f"cluster_phases: expected {TRAIN} last in {argv}")
    out[-1:] = [str(PROBE), "worker", str(TRAIN)]
    return ["bash", "-c", STAMP, "trjsc-stamp", *out]


def read_stamps(folder: Path) -> Times:
    """Every stamp file of one launch, by host; a worker's stamps get a ``worker_`` name."""
    hosts: Times = {}
    for path in folder.iterdir():
        host, role, _pid = path.stem.rsplit("-", 2)
        seen = hosts.setdefault(host, {})
        for line in path.read_text().splitlines():
            event, value = line.split()
            if role == "worker" and event in ("py_start", "cpu_self", "cpu_children"):
                event = "worker_start" if event == "py_start" else f"worker_{event}"
            seen[event] = float(value.replace(",", "."))
    return hosts


#: Stamps only torchrun_jsc's side has; the other side takes the next stamp's time.
OPTIONAL = ("ranks_assigned",)


def summarize(hosts: Times, start: float, end: float, nodes: int) -> Dict[str, float]:
    """One launch's figures: ``last:<phase>`` (s from srun's start), ``node:<phase>`` (median
    over nodes of the phase's own time), CPU sums and the wall time."""
    for t in hosts.values():
        for phase in OPTIONAL:
            after = t.get(PHASE_NAMES[PHASE_NAMES.index(phase) + 1])
            if phase not in t and after is not None:
                t[phase] = after
    if len(hosts) != nodes or any(set(PHASE_NAMES) - set(t) for t in hosts.values()):
        missing = {h: sorted(set(PHASE_NAMES) - set(t)) for h, t in hosts.items()}
        raise SystemExit(f"cluster_phases: stamps missing: {len(hosts)} hosts, {missing}")
    out: Dict[str, float] = {"wall": end - start}
    previous: Optional[str] = None
    for phase, _ in PHASES:
        out[f"last:{phase}"] = max(t[phase] for t in hosts.values()) - start
        spans = [t[phase] - (start if previous is None else t[previous]) for t in hosts.values()]
        out[f"node:{phase}"] = statistics.median(spans)
        previous = phase
    out["last:srun_exit"] = end - start
    out["node:srun_exit"] = end - max(t["atexit_end"] for t in hosts.values())
    out["cpu:agents"] = sum(t["cpu_self"] for t in hosts.values())
    out["cpu:workers"] = sum(t["worker_cpu_self"] for t in hosts.values())
    return out


def one(cluster: Cluster, kind: str, nodes: int) -> Dict[str, float]:
    argv, env = argv_for(cluster, kind, nodes)
    folder = Path(tempfile.mkdtemp(prefix="trjsc-phases-"))
    folder.chmod(0o755)
    try:
        start = time.time()
        r = cluster.srun(probed(argv), env={**env, ENV: str(folder)}, timeout=900)
        end = time.time()
        results = parse_results(r.output)
        if r.returncode != 0 or len(results) != nodes or not all(x.ok for x in results):
            raise SystemExit(f"{kind} on {nodes} nodes failed:\n{r.output[-3000:]}")
        if any(alarm in r.output for alarm in FALSE_ALARMS):
            raise SystemExit(f"{kind} on {nodes} nodes declared a node lost:\n{r.output[-3000:]}")
        return summarize(read_stamps(folder), start, end, nodes)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _med(rounds: List[Dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def _diff(data: Dict[str, List[Dict[str, float]]], key: str) -> float:
    return statistics.median(j[key] - h[key] for h, j in zip(data["hand"], data["torchrun_jsc"]))


def table(nodes: int, data: Dict[str, List[Dict[str, float]]]) -> str:
    """The Markdown table of one size."""
    rows = [
        f"{nodes} nodes. Each phase ends with the stamp named; 'last node' is when the last "
        "node got there (s from srun's start), 'per node' the phase's own time (median over "
        "the nodes); medians over the rounds, differences torchrun_jsc - hand-fixed per round.",
        "",
        "| phase (ends with) | last node: hand-fixed s | last node: torchrun_jsc s | difference s "
        "| per node: hand-fixed s | per node: torchrun_jsc s | difference s |",
        "|---|---|---|---|---|---|---|",
    ]
    for phase, what in (*PHASES, ("srun_exit", "srun exited (after the last exit handler)")):
        cells = [
            f"{_med(data[side], f'{axis}:{phase}'):.3f}"
            for axis in ("last", "node")
            for side in SIDES
        ]
        rows.append(
            f"| {phase}: {what} | {cells[0]} | {cells[1]} | {_diff(data, f'last:{phase}'):+.3f} "
            f"| {cells[2]} | {cells[3]} | {_diff(data, f'node:{phase}'):+.3f} |"
        )
    for key, what in (("cpu:agents", "agents"), ("cpu:workers", "workers")):
        rows.append(
            f"| CPU s of all {what} (sum over nodes) | | | | {_med(data['hand'], key):.2f} "
            f"| {_med(data['torchrun_jsc'], key):.2f} | {_diff(data, key):+.2f} |"
        )
    pairs = [j["wall"] / h["wall"] for h, j in zip(data["hand"], data["torchrun_jsc"])]
    rows += [
        "",
        f"Wall time (srun's start to its exit): hand-fixed {_med(data['hand'], 'wall'):.1f} s, "
        f"torchrun_jsc {_med(data['torchrun_jsc'], 'wall'):.1f} s, median paired ratio "
        f"{statistics.median(pairs):.3f} (pairs {min(pairs):.2f} to {max(pairs):.2f}, "
        f"{sum(p > 1 for p in pairs)} of {len(pairs)} above 1); {len(pairs)} paired rounds, "
        "order alternating.",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--raw", type=Path, help="append every launch's figures here (JSON lines)")
    parser.add_argument(
        "--section",
        default="cluster-launch-phases",
        help="section of docs/benchmarks.md that --record replaces",
    )
    args = parser.parse_args()
    tables = []
    for nodes in (int(n) for n in args.sizes.split(",")):
        prefix = free_prefix("trjp" + os.environ.get("TRJSC_CLUSTER_PREFIX_SUFFIX", ""))
        with Cluster(nodes=nodes, prefix=prefix, python=Path(sys.executable)) as c:
            one(c, "torchrun_jsc", nodes)  # warm caches
            data: Dict[str, List[Dict[str, float]]] = {side: [] for side in SIDES}
            for i in range(args.rounds):
                for kind in SIDES if i % 2 == 0 else SIDES[::-1]:
                    figures = one(c, kind, nodes)
                    data[kind].append(figures)
                    if args.raw:
                        with args.raw.open("a") as f:
                            f.write(
                                json.dumps({"nodes": nodes, "round": i, "kind": kind, **figures})
                            )
                            f.write("\n")
                    print(
                        f"{nodes} nodes {kind}: {figures['wall']:.1f} s, rendezvous complete "
                        f"{figures['last:rdzv_done']:.1f} s, result {figures['last:result']:.1f} s",
                        flush=True,
                    )
        tables.append(table(nodes, data))
    body = "\n\n".join(tables)
    print(body)
    if args.record:
        record(args.section, body, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
