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


WORKER_PHASES = ("worker_start", "result", "worker_end")


def read_stamps(folder: Path) -> Times:
    """Every stamp file of one launch, by host; a worker's stamps get a ``worker_`` name, and
    the CPU seconds a process had used at a stamp are under ``cpu@<stamp>``."""
    hosts: Times = {}
    for path in folder.iterdir():
        host, role, _pid = path.stem.rsplit("-", 2)
        seen = hosts.setdefault(host, {})
        for line in path.read_text().splitlines():
            event, value, *cpu = line.split()
            if role == "worker" and event in ("py_start", "cpu_self", "cpu_children"):
                event = "worker_start" if event == "py_start" else f"worker_{event}"
            seen[event] = float(value.replace(",", "."))
            if cpu:
                seen[f"cpu@{event}"] = float(cpu[0])
    return hosts


#: Stamps only torchrun_jsc's side has; the other side takes the next stamp's time.
OPTIONAL = ("ranks_assigned",)


def _cpu_spans(t: Dict[str, float]) -> Dict[str, float]:
    """The CPU seconds of each phase on one node: the agent's between its stamps, the worker's
    between its own (its first from its start)."""
    spans, last = {}, {"agent": 0.0, "worker": 0.0}
    for phase in PHASE_NAMES:
        role = "worker" if phase in WORKER_PHASES else "agent"
        if f"cpu@{phase}" in t:
            spans[phase] = t[f"cpu@{phase}"] - last[role]
            last[role] = t[f"cpu@{phase}"]
    return spans


def summarize(hosts: Times, start: float, end: float, nodes: int) -> Dict[str, float]:
    """One launch's figures: ``last:<phase>`` (s from srun's start), ``node:<phase>`` (median
    over nodes of the phase's own time), ``cpu:<phase>`` (CPU s, sum over nodes), CPU totals
    and the wall time."""
    for t in hosts.values():
        for phase in OPTIONAL:
            following = PHASE_NAMES[PHASE_NAMES.index(phase) + 1]
            for key in ("", "cpu@"):
                if key + phase not in t and key + following in t:
                    t[key + phase] = t[key + following]
    if len(hosts) != nodes or any(set(PHASE_NAMES) - set(t) for t in hosts.values()):
        missing = {h: sorted(set(PHASE_NAMES) - set(t)) for h, t in hosts.items()}
        raise SystemExit(f"cluster_phases: stamps missing: {len(hosts)} hosts, {missing}")
    out: Dict[str, float] = {"wall": end - start}
    previous: Optional[str] = None
    cpu = [_cpu_spans(t) for t in hosts.values()]
    for phase in PHASE_NAMES:
        out[f"last:{phase}"] = max(t[phase] for t in hosts.values()) - start
        spans = [t[phase] - (start if previous is None else t[previous]) for t in hosts.values()]
        out[f"node:{phase}"] = statistics.median(spans)
        if all(phase in c for c in cpu):
            out[f"cpu:{phase}"] = sum(c[phase] for c in cpu)
        previous = phase
    out["last:srun_exit"] = end - start
    out["node:srun_exit"] = end - max(t["atexit_end"] for t in hosts.values())
    out["cpu:agents"] = sum(t["cpu_self"] for t in hosts.values())
    out["cpu:workers"] = sum(t["worker_cpu_self"] for t in hosts.values())
    agents = sorted(t["cpu_self"] for t in hosts.values())
    out["cpu:agent_median"], out["cpu:agent_max"] = statistics.median(agents), agents[-1]
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
        f"{nodes} nodes. Each phase ends with the stamp named; 'last node': when the last "
        "node got there (s from srun's start); 'per node': the phase's own wall time (median "
        "over the nodes); 'CPU': the CPU seconds the agents (or workers) used in the phase, "
        "summed over the nodes. Medians over the rounds; differences torchrun_jsc - "
        "hand-fixed, median over the rounds.",
        "",
        "| phase (ends with) | last node: hand-fixed s | torchrun_jsc s | difference s "
        "| per node: hand-fixed s | torchrun_jsc s | difference s "
        "| CPU: hand-fixed s | torchrun_jsc s | difference s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cells(key: str, digits: int) -> str:
        if not all(key in r for side in SIDES for r in data[side]):
            return "| | | "
        hand, jsc = (_med(data[side], key) for side in SIDES)
        return f"| {hand:.{digits}f} | {jsc:.{digits}f} | {_diff(data, key):+.{digits}f} "

    for phase, what in (*PHASES, ("srun_exit", "srun exited (after the last exit handler)")):
        rows.append(
            f"| {phase}: {what} {cells(f'last:{phase}', 2)}{cells(f'node:{phase}', 3)}"
            f"{cells(f'cpu:{phase}', 2)}|"
        )
    for key, what in (("cpu:agents", "agents"), ("cpu:workers", "workers")):
        rows.append(f"| all of the {what}' CPU | | | | | | {cells(key, 2)}|")
    for key, what in (("cpu:agent_median", "median"), ("cpu:agent_max", "most")):
        rows.append(f"| one agent's CPU, {what} over the nodes | | | | | | {cells(key, 2)}|")
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
